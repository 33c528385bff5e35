"""#29 N5: no secret at rest, and none anywhere else a secret could leak to.

Credentials are planted in a run's input, its ``metadata`` (key and value), the arguments of a
call waiting for approval (written by the model), the reason of a rejection and the text given to
``submit_tool_output`` (on real workers, which load the approver
agent and an OpenTelemetry SDK exporting spans to a file). Then every place is scanned: every
Redis key of the namespace (run records, the broker's messages, streams, cached heads), every S3
object (``head.json``, archives), the worker's log, the console's pages (runs, run, session,
sessions), the worker's and the console's ``/metrics``, and the spans exported
by the worker and by this process (an in-memory exporter): 0 hits. The secrets are new for each
run of the test, so nothing another test planted can be found.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.console import Console
from tests.support.otel_spans import SPANS_FILE_ENV, memory_exporter, span_doc
from tests.support.redis_scan import flatten_redis
from tests.support.stack import Stack, unique
from tests.test_metrics import MeteredWorker
from tether.core.results import RunStatus
from tether.dev.redis_server import free_port
from tether.persistence.redis_conn import redis_from_url
from tether.producer.client import Producer


def planted() -> dict[str, str]:
    """Fresh credentials of four formats the default redaction knows, and one a model writes."""
    hexes = uuid.uuid4().hex + uuid.uuid4().hex
    return {
        "openai": f"sk-proj-{hexes[:40]}",
        "aws": "AKIA" + hexes[:16].upper(),
        "github": "ghp_" + hexes[:36],
        "bearer": "eyJ" + hexes[:30],
        "model": f"sk-proj-{hexes[8:48]}",  # the approver's model writes it into a call
    }


@dataclass
class Fleet:
    worker: MeteredWorker
    console: Console
    producer: Producer
    spans_file: Path
    namespace: str
    stack: Stack


@pytest.fixture
def fleet(stack: Stack, tmp_path: Path) -> Iterator[Fleet]:
    namespace, queue = f"sec-{uuid.uuid4().hex[:8]}", "secq"
    spans_file = tmp_path / "spans.jsonl"
    env = dict(
        stack.env,
        TETHER_NAMESPACE=namespace,
        TETHER_QUEUE=queue,
        TETHER_AGENT_MODULES="tests.support.approval_agents,tests.support.otel_spans",
        **{SPANS_FILE_ENV: str(spans_file)},
    )
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # `tether worker` makes a fresh one
    worker = MeteredWorker(env, tmp_path, free_port(), queue=queue, pool=1)
    console = Console(env, tmp_path)
    producer = Producer(stack.settings.model_copy(update={"namespace": namespace, "queue": queue}))
    try:
        worker.start()
        console.start()
        yield Fleet(worker, console, producer, spans_file, namespace, stack)
    finally:
        producer.close()
        console.stop()
        worker.stop()


def places(fleet: Fleet, sessions: list[str], run_ids: list[str]) -> dict[str, bytes]:
    """Everything a secret could have reached, by where."""
    found: dict[str, bytes] = {}
    redis = redis_from_url(fleet.stack.env["TETHER_REDIS_URL"])
    try:
        for key, value in flatten_redis(redis, match=f"{fleet.namespace}*").items():
            found[f"redis {key!r}"] = key + b"\x00" + value
    finally:
        redis.close()
    stack = fleet.stack
    s3 = stack.s3_client()
    for key in stack.s3_keys():
        if any(s in key for s in sessions):  # heads, archive segments, blobs of these sessions
            found[f"s3 {key}"] = s3.get_object(Bucket=stack.bucket, Key=key)["Body"].read()
    found["worker log"] = fleet.worker.log_path.read_bytes()
    pages = ["/runs", "/sessions", "/metrics"] + [f"/sessions/{s}" for s in sessions]
    pages += [f"/runs/{r}" for r in run_ids]
    for page in pages:
        response = httpx.get(fleet.console.url + page, timeout=30)
        assert response.status_code == 200, (page, response.status_code)
        found[f"console {page}"] = response.content
    metrics = httpx.get(f"http://127.0.0.1:{fleet.worker.metrics_port}/metrics", timeout=30)
    found["worker /metrics"] = metrics.content
    found["worker spans"] = fleet.spans_file.read_bytes() if fleet.spans_file.exists() else b""
    return found


def test_planted_secrets_are_found_nowhere(fleet: Fleet) -> None:
    spans = memory_exporter()
    secret = planted()
    text = (
        f"keys {secret['openai']} and {secret['aws']}, token {secret['github']}, "
        f"header Authorization: Bearer {secret['bearer']}"
    )
    producer = fleet.producer
    notes, bank = unique("sec-notes"), unique("sec-bank")
    metadata = {secret["github"]: {"api_key": secret["openai"], "list": [secret["aws"]]}}
    ran = producer.run(notes, f"remember {text}", agent="notes", metadata=metadata, wait_s=60)
    assert ran.status is RunStatus.COMPLETED
    memo = secret["model"].removeprefix("sk-proj-")
    waiting = producer.run(bank, f"transfer memo:{memo} 5", agent="approver", wait_s=60)
    call_id = waiting.pending[0].call_id
    # a credential the model wrote into a call waiting for approval: masked in the pending
    # call (the run record, its result, the console) as in the call's event
    arguments = waiting.pending[0].arguments
    assert "***" in arguments and secret["model"] not in arguments
    # an invented output for a call waiting for approval is refused, but its text was stored
    # in the run record before the worker could refuse it
    refused = producer.submit_tool_output(bank, call_id, text, agent="approver")
    assert refused.run_result(timeout=60).error_type == "InvalidInput"
    done = producer.reject(bank, call_id, f"no: {text}", agent="approver").run_result(timeout=60)
    assert done.status is RunStatus.COMPLETED and "***" in (done.output or "")

    found = places(fleet, [notes, bank], [ran.run_id, waiting.run_id, done.run_id])
    found["producer spans"] = repr([span_doc(s) for s in spans.get_finished_spans()]).encode()
    hits = [
        (where, kind)
        for where, blob in found.items()
        for kind, value in secret.items()
        if value.encode() in blob
    ]
    assert hits == []
    # the scans did read the data: the sessions' heads, the masks, the spans
    assert any(where.startswith("s3 ") and notes in where for where in found)
    assert any(b"***" in blob for where, blob in found.items() if where.startswith("redis"))
    assert found["worker spans"] and found["producer spans"] != b"[]"
