"""#49 with #29's planted-secret scan: credentials in ``TETHER_MCP_SERVERS`` (a stdio server's
environment variable, an HTTP server's bearer token) reach their servers and nothing else.

A real worker (with ``/metrics``, OpenTelemetry spans to a file, the console) runs the test MCP
server with a token in its environment and calls ``whoami``, which answers with the token; it
also runs an agent whose HTTP server is down, whose failure the worker logs. Then
every place is scanned (#29's list: every Redis key of the namespace, the sessions' S3 objects,
the worker's log, the console's pages, both ``/metrics``, the spans): 0 hits. The secrets are
new for each run of the test.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.console import Console
from tests.support.mcp_agents import server_command
from tests.support.otel_spans import SPANS_FILE_ENV, memory_exporter, span_doc
from tests.support.stack import Stack, unique
from tests.test_metrics import MeteredWorker
from tests.test_secrets_everywhere_workers import Fleet, places
from tether.core.results import RunStatus
from tether.dev.redis_server import free_port
from tether.producer.client import Producer

SECRETS = {
    "stdio env": "mcp-env-" + uuid.uuid4().hex,
    "http bearer": "mcp-bearer-" + uuid.uuid4().hex,
}


@pytest.fixture
def fleet(stack: Stack, tmp_path: Path) -> Iterator[Fleet]:
    namespace, queue = f"msec-{uuid.uuid4().hex[:8]}", "msecq"
    spans_file = tmp_path / "spans.jsonl"
    servers = {
        "test": {
            "command": server_command(),
            "env": {"TETHER_TEST_MCP_DIR": str(tmp_path), "TEST_TOKEN": SECRETS["stdio env"]},
        },
        "remote": {
            "url": f"http://127.0.0.1:{free_port()}/mcp",  # nothing listens: every call fails
            "headers": {"Authorization": f"Bearer {SECRETS['http bearer']}"},
            "connect_timeout_s": 2,
        },
    }
    env = dict(
        stack.env,
        TETHER_NAMESPACE=namespace,
        TETHER_QUEUE=queue,
        TETHER_AGENT_MODULES="tests.support.mcp_agents,tests.support.otel_spans",
        TETHER_MCP_SERVERS=json.dumps(servers),
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


def test_mcp_credentials_are_found_nowhere(fleet: Fleet) -> None:
    spans = memory_exporter()
    producer = fleet.producer
    local, remote = unique("msec-local"), unique("msec-remote")
    told = producer.run(local, "whoami", agent="mcp", wait_s=60)
    assert told.status is RunStatus.COMPLETED and told.output == "token=*** auth="
    failed = producer.run(remote, 'add {"a": 1, "b": 2}', agent="mcp-remote", wait_s=60)
    assert failed.status is RunStatus.COMPLETED and "UnknownTool" in (failed.output or "")

    found = places(fleet, [local, remote], [told.run_id, failed.run_id])
    found["producer spans"] = repr([span_doc(s) for s in spans.get_finished_spans()]).encode()
    hits = [
        (where, kind)
        for where, blob in found.items()
        for kind, value in SECRETS.items()
        if value.encode() in blob
    ]
    assert hits == []
    # the scans did read the data: the sessions' heads, the masks, the MCP spans
    assert any(where.startswith("s3 ") and local in where for where in found)
    assert any(b"token=***" in blob for where, blob in found.items() if where.startswith("s3 "))
    assert b"tether.mcp" in found["worker spans"]
    assert b"tether_mcp_call_seconds" in found["worker /metrics"]
    assert b"'remote': its tools are not offered now" in found["worker log"]
