"""docker-compose.yml and the Dockerfile, validated without a Docker engine.

What can be checked here is checked for real: the YAML parses, every service can be created
(image or build), images are pinned, every TETHER_* variable is a real setting, the worker
command is accepted by the real CLI, the bucket-init module creates the bucket on a real S3
endpoint (moto), and the S3 server's generated credentials file is valid JSON.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from typer.testing import CliRunner

from tether.producer.ops.cli import app
from tether.producer.ops.s3_init import bucket_of, ensure_bucket
from tether.settings import ENV_PREFIX, Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
_VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's variable substitution: ``${VAR:-default}``, ``${VAR}`` and ``$$``."""
    env = env or {}
    out = _VAR.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value.replace("$$", "\0"))
    return out.replace("\0", "$")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict) and isinstance(doc.get("services"), dict)
    return doc


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def ours(service: dict[str, Any]) -> bool:
    """Built from our Dockerfile (so it runs Tether code)."""
    return "build" in service


def test_every_service_can_be_created(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"redis", "s3", "s3-init", "worker", "flower"} <= set(services)
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown {dependency}"
    assert "flower" in services["flower"].get("profiles", [])
    assert DOCKERFILE.is_file()


def test_images_are_pinned(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        image = service.get("image")
        if image is None:
            continue
        repo, _, tag = image.rpartition(":")
        assert repo and "/" not in tag, f"{name}: {image} has no tag"
        assert tag != "latest" and re.search(r"\d", tag), f"{name}: {image} is not pinned"
    froms = re.findall(r"^FROM\s+(\S+)", DOCKERFILE.read_text(), flags=re.MULTILINE)
    assert froms
    for image in froms:
        if ":" in image:
            assert not image.endswith(":latest")
            assert re.search(r":\d+\.\d+\.\d+", image), f"Dockerfile base {image} is not pinned"
        else:
            assert image == "base", image  # a stage of this Dockerfile
    assert "minio/minio" not in COMPOSE.read_text().replace("quay.io/minio/minio", "")


def test_environment_keys_are_real_settings(compose: dict[str, Any]) -> None:
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    seen = set()
    for name, service in compose["services"].items():
        env = environment(service)
        for key in env:
            if key.startswith(ENV_PREFIX):
                assert key in known, f"{name}: {key} is not a Tether setting"
                seen.add(key)
            elif ours(service):
                assert key.startswith("AWS_"), f"{name}: unexpected variable {key}"
        if ours(service):
            values = {k: interpolate(v) for k, v in env.items() if k.startswith(ENV_PREFIX)}
            with pytest.MonkeyPatch.context() as patch:
                for key in [k for k in os.environ if k.startswith(ENV_PREFIX)]:
                    patch.delenv(key)
                for key, value in values.items():
                    patch.setenv(key, value)
                settings = load_settings()  # the values parse
            assert settings.store_url.startswith("s3://"), name
    assert {"TETHER_BROKER_URL", "TETHER_STORE_URL", "TETHER_S3_ENDPOINT_URL"} <= seen


def test_redis_persists_because_it_is_the_broker(compose: dict[str, Any]) -> None:
    redis = compose["services"]["redis"]
    assert redis["image"].startswith("redis:7.")
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command
    assert any(v.endswith(":/data") for v in redis.get("volumes", []))


def test_worker_runs_the_real_cli_and_scales(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    command = [interpolate(part) for part in worker["command"]]
    assert command[:2] == ["tether", "worker"]
    assert "container_name" not in worker and "ports" not in worker  # --scale worker=N works
    runner = CliRunner()
    helped = runner.invoke(app, ["worker", "--help"])
    assert helped.exit_code == 0, helped.output
    for option in ("--concurrency", "--pool", "--queues", "--loglevel"):
        assert option in helped.output
    built = runner.invoke(app, [*command[1:], "--print-command"], env=environment_for(worker))
    assert built.exit_code == 0, built.output
    assert "-m celery -A tether.worker.app worker" in built.output
    assert "--concurrency 2" in built.output and "--queues tether" in built.output
    # the warm shutdown finishes a run without checkpoints: the grace covers the longest run
    max_run_s = int(interpolate(environment(worker)["TETHER_MAX_RUN_S"]))
    for name in ("worker", "worker-cluster"):
        grace = compose["services"][name]["stop_grace_period"]
        assert grace.endswith("m") and int(grace[:-1]) * 60 >= max_run_s, (name, grace)


def environment_for(service: dict[str, Any]) -> dict[str, str | None]:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith(ENV_PREFIX)}
    env.update({k: interpolate(v) for k, v in environment(service).items()})
    return env


def test_s3_init_creates_the_bucket_once(
    compose: dict[str, Any], moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    init = compose["services"]["s3-init"]
    assert init["command"] == ["python", "-m", "tether.producer.ops.s3_init"]
    store_url = environment(compose["services"]["worker"])["TETHER_STORE_URL"]
    assert environment(init)["TETHER_STORE_URL"] == store_url
    assert bucket_of(store_url) == "tether"
    # A bucket of our own on the shared moto server: no reset, which would also wipe the
    # buckets of the session-scoped test stack (moto keeps one in-process backend).
    bucket = f"compose-init-{uuid.uuid4().hex[:12]}"
    fake_aws = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }
    for key, value in fake_aws.items():
        monkeypatch.setenv(key, value)
    settings = Settings(store_url=f"s3://{bucket}/sessions", s3_endpoint_url=moto_endpoint)
    assert ensure_bucket(settings, wait_s=5) is True
    assert ensure_bucket(settings, wait_s=5) is False
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    assert bucket in [b["Name"] for b in client.list_buckets()["Buckets"]]


def test_s3_server_credentials_file_is_valid_json(compose: dict[str, Any], tmp_path: Path) -> None:
    s3 = compose["services"]["s3"]
    script = interpolate(s3["command"][0])
    setup = script.split("exec weed", 1)[0].replace("/tmp/s3.json", str(tmp_path / "s3.json"))
    env = {k: interpolate(v) for k, v in environment(s3).items()}
    subprocess.run(["/bin/sh", "-c", setup], env={"PATH": "/usr/bin:/bin", **env}, check=True)
    config = json.loads((tmp_path / "s3.json").read_text())
    credentials = config["identities"][0]["credentials"][0]
    worker_env = {k: interpolate(v) for k, v in environment(compose["services"]["worker"]).items()}
    assert credentials["accessKey"] == worker_env["AWS_ACCESS_KEY_ID"]
    assert credentials["secretKey"] == worker_env["AWS_SECRET_ACCESS_KEY"]
    assert "-s3.config=/tmp/s3.json" in script


def test_cluster_profile_joins_its_nodes_and_points_workers_at_them(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    nodes = sorted(n for n, s in services.items() if n.startswith("redis-node-"))
    assert nodes == ["redis-node-1", "redis-node-2", "redis-node-3"]
    for name in [*nodes, "redis-cluster-init", "worker-cluster"]:
        assert services[name].get("profiles") == ["cluster"], name
    for name in nodes:
        command = " ".join(services[name]["command"])
        assert "--cluster-enabled yes" in command and "--appendonly yes" in command
    create = " ".join(services["redis-cluster-init"]["command"])
    assert "--cluster create" in create and "--cluster-replicas 0" in create
    assert all(f"{n}:6379" in create for n in nodes)
    worker = services["worker-cluster"]
    env = {k: interpolate(v) for k, v in environment(worker).items()}
    url = env["TETHER_REDIS_URL"]
    assert url.startswith("redis+cluster://")
    assert sorted(h.split(":")[0] for h in url.split("://", 1)[1].split(",")) == nodes
    assert env["TETHER_BROKER_URL"] == "redis://redis:6379/0"  # the broker is no cluster
    assert set(worker["depends_on"]) >= {"redis", "redis-cluster-init", "s3-init"}
    with pytest.MonkeyPatch.context() as patch:
        for key in [k for k in os.environ if k.startswith(ENV_PREFIX)]:
            patch.delenv(key)
        for key, value in env.items():
            if key.startswith(ENV_PREFIX):
                patch.setenv(key, value)
        assert load_settings().effective_redis_url == url  # the cluster URL passes validation


def test_the_beat_runs_the_real_cli_and_no_host_port_is_6379(
    compose: dict[str, Any],
) -> None:
    """#50: nothing fired schedules under compose (no beat), and Redis took the host's 6379,
    where a Redis of the user's own often runs."""
    services = compose["services"]
    beat = services["beat"]
    assert environment(beat) == environment(services["worker"])  # the same settings
    assert "redis" in beat["depends_on"] and "ports" not in beat
    assert beat.get("profiles") is None  # `docker compose up` starts it
    command = [interpolate(part) for part in beat["command"]]
    assert command[:2] == ["tether", "beat"]
    built = CliRunner().invoke(app, [*command[1:], "--print-command"], env=environment_for(beat))
    assert built.exit_code == 0, built.output
    assert "-m celery -A tether.producer.schedules.beat beat" in built.output
    published = [
        interpolate(port).split(":")[-2]
        for service in services.values()
        for port in service.get("ports", [])
    ]
    assert published and "6379" not in published, published


def test_the_image_has_celery_redbeat() -> None:
    """The base stage installs the ``schedules`` extra, and that extra is celery-redbeat."""
    base = DOCKERFILE.read_text().split(" AS flower", 1)[0]
    assert re.search(r'pip install "\.\[schedules\]"', base), base
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^schedules = \["celery-redbeat[^"]*"\]', pyproject, flags=re.MULTILINE)


def test_the_agent_image_recipe_loads_your_agents(compose: dict[str, Any], tmp_path: Path) -> None:
    """deploy/agents.Dockerfile: FROM the image compose builds, COPY a package, name it in
    TETHER_AGENT_MODULES on PYTHONPATH. Its steps, done here to a folder: the worker's
    registry finds the agent."""
    recipe = (ROOT / "deploy" / "agents.Dockerfile").read_text()
    lines = [line for line in recipe.replace("\\\n", " ").splitlines() if line.strip()]
    steps = [line.split(None, 1) for line in lines if not line.startswith("#")]
    (_, base), (_, copy), (_, env) = steps
    assert base == compose["services"]["worker"]["image"]
    source, target = copy.split()[-2:]
    variables = dict(part.split("=", 1) for part in env.split())
    package = source.strip("/")
    assert target.rstrip("/") == f"{variables['PYTHONPATH']}/{package}"
    assert variables["TETHER_AGENT_MODULES"] == package

    root = tmp_path / variables["PYTHONPATH"].lstrip("/")
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text(
        "from tether.runtime.demo_agents import echo_agent\nTETHER_AGENTS = {'mine': echo_agent}\n"
    )
    env_vars = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env_vars.update(PYTHONPATH=str(root), TETHER_AGENT_MODULES=variables["TETHER_AGENT_MODULES"])
    code = (
        "from tether.runtime.registry import AgentRegistry; from tether.settings import "
        "load_settings; print(AgentRegistry.default(load_settings().agent_modules).names())"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], env=env_vars, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert "'mine'" in shown.stdout
