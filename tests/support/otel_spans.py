"""Loaded by worker processes through TETHER_AGENT_MODULES: installs the OpenTelemetry SDK with
a JSON-lines span exporter writing to ``$OTEL_TEST_SPANS_FILE`` (one line per ended span, from
any process: each write is one append of one short line).

Tether depends on ``opentelemetry-api`` only; a deployment installs the SDK the same way (an
agent module, a sitecustomize, or ``opentelemetry-instrument``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tether.runtime.agent import Agent

SPANS_FILE_ENV = "OTEL_TEST_SPANS_FILE"


def span_doc(span: ReadableSpan) -> dict[str, object]:
    """What the tests read of a span."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "attributes": dict(span.attributes or {}),
        "pid": os.getpid(),
    }


class JsonLinesExporter(SpanExporter):
    """Appends one JSON line per span to a file (safe across forked processes)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_doc(s), default=str) + "\n" for s in spans)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def memory_exporter() -> InMemorySpanExporter:
    """The SDK in this (test) process, exporting to memory: a new exporter on the provider
    already set, or on a new one."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def _install() -> None:
    path = os.environ.get(SPANS_FILE_ENV)
    if not path or isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(path)))
    trace.set_tracer_provider(provider)


_install()

TETHER_AGENTS: dict[str, Callable[[], Agent]] = {}
