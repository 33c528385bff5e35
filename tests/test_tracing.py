"""One trace from the producer to the worker: spans of one run collected from both processes.

The producer is this test process (the OpenTelemetry SDK with an in-memory exporter); the
workers are real Celery prefork workers that load ``tests.support.otel_spans`` (the SDK with a
JSON-lines file exporter) through TETHER_AGENT_MODULES. The run request carries the submit
span's W3C context, so the worker's spans continue the producer's trace.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.otel_spans import SPANS_FILE_ENV, memory_exporter, span_doc
from tests.support.stack import Stack, eventually, unique
from tether.core.results import RunStatus
from tether.dev.workers import WorkerFleet
from tether.producer.client import Producer
from tether.runs.contract import RunRequest

QUEUE = "traced"


@pytest.fixture(scope="module")
def producer_spans() -> InMemorySpanExporter:
    """The SDK in this process, exporting to memory."""
    return memory_exporter()


@pytest.fixture(scope="module")
def traced_workers(
    stack: Stack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, Producer]]:
    """Two workers on their own queue with the SDK loaded; a producer sending to that queue."""
    log_dir = tmp_path_factory.mktemp("traced")
    spans_file = log_dir / "spans.jsonl"
    env = dict(
        stack.env,
        TETHER_AGENT_MODULES="tests.support.otel_spans",
        TETHER_QUEUE=QUEUE,
        **{SPANS_FILE_ENV: str(spans_file)},
    )
    fleet = WorkerFleet(env, log_dir, count=2, queue=QUEUE, prefix="tw")
    producer = Producer(stack.settings.model_copy(update={"queue": QUEUE}))
    try:
        fleet.start()
        yield spans_file, producer
    finally:
        producer.close()
        fleet.stop()


def _worker_spans(path: Path, run_id: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    docs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    run_spans = [d for d in docs if d["attributes"].get("tether.run_id") == run_id]
    names = {d["name"] for d in run_spans}
    if not {"tether.commit", "tether.run"} <= names:
        return []  # the worker has not finished exporting this run yet (the run span ends last)
    trace_ids = {d["trace_id"] for d in run_spans}
    return [d for d in docs if d["trace_id"] in trace_ids]


def test_one_trace_spans_the_producer_and_the_worker(
    traced_workers: tuple[Path, Producer], producer_spans: InMemorySpanExporter
) -> None:
    spans_file, producer = traced_workers
    sid = unique("traced")
    result = producer.run(sid, "2 + 3", agent="calculator", wait_s=60)
    assert result.status is RunStatus.COMPLETED and result.output == "5"

    submits = [span_doc(s) for s in producer_spans.get_finished_spans()]
    submit = next(s for s in submits if s["name"] == "tether.submit")
    worker = eventually(lambda: _worker_spans(spans_file, result.run_id), timeout_s=30)
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in worker:
        by_name.setdefault(span["name"], []).append(span)

    assert {s["trace_id"] for s in worker} == {submit["trace_id"]}, "one trace, both processes"
    assert {s["pid"] for s in worker}.isdisjoint({os.getpid()}), "worker spans come from workers"
    (wait,) = by_name["tether.queue_wait"]
    (run,) = by_name["tether.run"]
    assert wait["parent_id"] == submit["span_id"]
    assert run["parent_id"] == submit["span_id"]
    assert run["attributes"]["tether.session_id"] == sid
    assert run["attributes"]["tether.attempt"] == 1
    assert wait["start_ns"] <= run["start_ns"]
    for name in ("tether.restore", "tether.model", "tether.tool", "tether.commit"):
        assert by_name.get(name), f"no {name} span: {sorted(by_name)}"
        assert all(s["parent_id"] == run["span_id"] for s in by_name[name]), name
    assert len(by_name["tether.model"]) == 2  # asks for the tool, then answers
    (tool,) = by_name["tether.tool"]
    assert tool["attributes"]["gen_ai.tool.name"] == "calculate"
    assert tool["attributes"]["tether.tool.status"] == "COMPLETED"
    assert all("gen_ai.usage.input_tokens" in s["attributes"] for s in by_name["tether.model"])
    # the spans nest in time too: the tool ran inside the run, the commit after it
    assert run["start_ns"] <= tool["start_ns"] <= tool["end_ns"] <= run["end_ns"]
    (commit,) = by_name["tether.commit"]
    assert tool["end_ns"] <= commit["start_ns"]


def test_a_request_carries_no_trace_context_when_nothing_is_traced() -> None:
    doc = RunRequest(run_id="r-1", request_id="r-1", session_id="s", agent="echo", input="hi")
    assert "trace" not in doc.model_dump(mode="json")  # the wire format is unchanged
    assert "trace" not in json.loads(doc.model_dump_json())
    parent = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    traced = doc.model_copy(update={"trace": {"traceparent": parent}})
    assert RunRequest.model_validate_json(traced.model_dump_json()).trace == traced.trace
