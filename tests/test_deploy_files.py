"""The Kubernetes files of ``deploy/k8s/``, validated offline (no cluster, nothing fetched).

Every document is checked against its schema in strict mode (an unknown field fails): the
Kubernetes kinds with ``kubernetes-validate`` (the upstream schemas of a pinned version, shipped
in the package), KEDA's ``ScaledObject`` with ``jsonschema`` against the schema vendored in
``deploy/schemas/``. Then what a schema cannot see: the pieces point at each other, the settings
are real and load, the commands are accepted by the real CLI, and the KEDA trigger watches the
very list Celery's broker fills for the configured namespace and queue.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from tether.producer.ops.cli import app
from tether.runs.celery_config import celery_config
from tether.settings import ENV_PREFIX, Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
KEDA_SCHEMA = ROOT / "deploy" / "schemas" / "keda-scaledobject-v1alpha1.json"
#: The oldest Kubernetes the manifests are meant for (KEDA 2.16 supports 1.29-1.31).
KUBERNETES_VERSION = "1.29.0"

Doc = dict[str, Any]


def _documents() -> list[tuple[str, Doc]]:
    found = []
    for path in sorted(K8S.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                found.append((path.relative_to(K8S).as_posix(), doc))
    return found


DOCS = _documents()


def _one(kind: str, name: str) -> Doc:
    matches = [d for _, d in DOCS if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} documents"
    return matches[0]


def validate(doc: Doc) -> None:
    """Raise when ``doc`` does not match its kind's schema (strict)."""
    if doc.get("apiVersion") == "keda.sh/v1alpha1":
        schema = json.loads(KEDA_SCHEMA.read_text())
        jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    else:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_expected_objects_are_there() -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for _, d in DOCS)
    assert kinds == [
        ("ConfigMap", "tether-config"),
        ("Deployment", "tether-beat"),
        ("Deployment", "tether-console"),
        ("Deployment", "tether-worker"),
        ("ScaledObject", "tether-worker"),
        ("Service", "tether-console"),
    ]


@pytest.mark.parametrize(
    "doc", [d for _, d in DOCS], ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in DOCS]
)
def test_every_document_matches_its_schema(doc: Doc) -> None:
    validate(doc)


@pytest.mark.parametrize(
    ("kind", "name", "path", "bad"),
    [
        ("Deployment", "tether-worker", ("spec", "template", "spec", "containers", 0), "comand"),
        ("Deployment", "tether-worker", ("spec",), "replica"),
        ("Service", "tether-console", ("spec",), "selectr"),
        ("ScaledObject", "tether-worker", ("spec",), "maxReplicas"),
        ("ScaledObject", "tether-worker", ("spec", "triggers", 0), "metdata"),
    ],
)
def test_a_misspelt_field_is_refused(
    kind: str, name: str, path: tuple[str | int, ...], bad: str
) -> None:
    """The checks can fail: one unknown field in a copy of a real document is an error."""
    doc = json.loads(json.dumps(_one(kind, name)))
    node: Any = doc
    for step in path:
        node = node[step]
    node[bad] = 1
    with pytest.raises((kubernetes_validate.ValidationError, jsonschema.ValidationError)):
        validate(doc)


def test_a_wrong_type_is_refused() -> None:
    doc = json.loads(json.dumps(_one("ScaledObject", "tether-worker")))
    doc["spec"]["maxReplicaCount"] = "ten"
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)
    worker = json.loads(json.dumps(_one("Deployment", "tether-worker")))
    worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "2m"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(worker)


def _config() -> dict[str, str]:
    data = _one("ConfigMap", "tether-config")["data"]
    return {str(k): str(v) for k, v in data.items()}


def test_the_settings_are_real_and_load(monkeypatch: pytest.MonkeyPatch) -> None:
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    config = _config()
    assert set(config) <= known, set(config) - known
    for key in [k for k in os.environ if k.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(key)
    for key, value in config.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert settings.store_url.startswith("s3://")
    assert settings.metrics_host == "0.0.0.0"  # Prometheus scrapes the pod's address


def _labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("name", ["tether-worker", "tether-console", "tether-beat"])
def test_deployments_select_their_pods_and_read_the_settings(name: str) -> None:
    deployment = _one("Deployment", name)
    template = deployment["spec"]["template"]
    assert _labels_match(
        deployment["spec"]["selector"]["matchLabels"], template["metadata"]["labels"]
    )
    (container,) = template["spec"]["containers"]
    assert {"configMapRef": {"name": "tether-config"}} in container["envFrom"]
    # config.yaml tells to move URLs holding a Redis password into the Secret: every pod must
    # read it whole (the console read only its token and the AWS keys, and fell back to
    # redis://127.0.0.1:6379 while its TCP probe kept it Ready)
    secret = {"secretRef": {"name": "tether-credentials", "optional": True}}
    assert secret in container["envFrom"], container["envFrom"]
    image = container["image"]
    repo, _, tag = image.rpartition(":")
    assert repo and re.fullmatch(r"\d+\.\d+\.\d+", tag), f"{image} is not pinned"
    assert template["spec"]["securityContext"]["runAsUser"] == 10001  # the Dockerfile's user
    # Kubernetes expands $(VAR) from the container's env; every TETHER_* there is a setting
    names = {e["name"] for e in container.get("env", [])}
    assert not any(n.startswith(ENV_PREFIX) for n in names), names


def test_the_console_service_reaches_the_console_pods() -> None:
    service = _one("Service", "tether-console")
    console = _one("Deployment", "tether-console")["spec"]["template"]
    assert _labels_match(service["spec"]["selector"], console["metadata"]["labels"])
    ports = {p["name"] for p in console["spec"]["containers"][0]["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


def test_the_commands_are_accepted_by_the_real_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith(ENV_PREFIX)}
    env.update(_config())
    env["TETHER_METRICS_HOST"] = "127.0.0.1"  # --print-command binds nothing, but checks it
    worker = _one("Deployment", "tether-worker")["spec"]["template"]["spec"]["containers"][0]
    assert worker["command"][:2] == ["tether", "worker"]
    built = runner.invoke(app, [*worker["command"][1:], "--print-command"], env=env)
    assert built.exit_code == 0, built.output
    assert "--concurrency 2" in built.output and "--queues tether" in built.output
    console = _one("Deployment", "tether-console")["spec"]["template"]["spec"]["containers"][0]
    assert console["command"][:2] == ["tether", "console"]
    helped = runner.invoke(app, ["console", "--help"])
    for option in [part for part in console["command"] if part.startswith("--")]:
        assert option in helped.output, option
    assert "--token" in console["command"]  # a console on a pod address needs one
    token_source = {e["name"]: e for e in console["env"]}["CONSOLE_TOKEN"]
    assert "secretKeyRef" in token_source["valueFrom"]


def test_kubectl_apply_of_the_folder_needs_no_keda() -> None:
    """#50: ``kubectl apply -f deploy/k8s/`` failed on a cluster without KEDA (no ScaledObject
    kind). The folder's own files hold core Kubernetes kinds only (``kubectl apply -f DIR``
    does not descend into subfolders); KEDA's is applied on its own from ``keda/``."""
    core = {"v1", "apps/v1"}
    for name, doc in DOCS:
        top_level = "/" not in name
        assert (doc["apiVersion"] in core) == top_level, (name, doc["apiVersion"])
    assert [n for n, d in DOCS if d["kind"] == "ScaledObject"] == ["keda/scaledobject.yaml"]


def test_one_beat_fires_the_schedules_with_the_real_cli() -> None:
    """#50: deploy/k8s ran no beat, so no schedule fired. One replica, replaced (not rolled),
    with the settings every pod reads, and a command the real CLI accepts."""
    beat = _one("Deployment", "tether-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}  # never two for the lock's time
    (container,) = beat["spec"]["template"]["spec"]["containers"]
    worker = _one("Deployment", "tether-worker")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == worker["image"] and container["envFrom"] == worker["envFrom"]
    assert container["command"][:2] == ["tether", "beat"]
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith(ENV_PREFIX)}
    env.update(_config())
    built = CliRunner().invoke(app, [*container["command"][1:], "--print-command"], env=env)
    assert built.exit_code == 0, built.output
    assert "-m celery -A tether.producer.schedules.beat beat" in built.output


def test_scale_in_leaves_time_for_the_warm_shutdown() -> None:
    spec = _one("Deployment", "tether-worker")["spec"]["template"]["spec"]
    # a run without checkpoints is finished before the worker exits: a grace shorter than the
    # longest run (120 s against TETHER_MAX_RUN_S 600) killed it midway, to be redone
    max_run_s = int(_one("ConfigMap", "tether-config")["data"]["TETHER_MAX_RUN_S"])
    assert spec["terminationGracePeriodSeconds"] >= max_run_s


def test_keda_scales_the_worker_deployment_on_the_broker_queue() -> None:
    scaled = _one("ScaledObject", "tether-worker")["spec"]
    worker = _one("Deployment", "tether-worker")
    target = scaled["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", worker["metadata"]["name"])
    assert 1 <= scaled["minReplicaCount"] < scaled["maxReplicaCount"]
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "redis"
    config = _config()
    settings = Settings(
        broker_url=config["TETHER_BROKER_URL"],
        namespace=config["TETHER_NAMESPACE"],
        queue=config["TETHER_QUEUE"],
    )
    prefix = celery_config(settings)["broker_transport_options"]["global_keyprefix"]
    assert trigger["metadata"]["listName"] == f"{prefix}{settings.queue}"
    host_port = config["TETHER_BROKER_URL"].removeprefix("redis://").split("/")[0]
    assert trigger["metadata"]["address"] == host_port
    assert trigger["metadata"]["databaseIndex"] == config["TETHER_BROKER_URL"].rsplit("/", 1)[1]
