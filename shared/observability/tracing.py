"""OpenTelemetry spans of a run, producer to worker, in one trace.

The spans: ``tether.submit`` (producer), then on the worker ``tether.queue_wait`` (submission
to the attempt's start) and ``tether.run`` (the attempt) as its children, and under the run
``tether.restore`` (loading the session head), ``tether.model`` (each model call, with token
usage), ``tether.tool`` (each tool call) and ``tether.commit``.

The producer writes the W3C trace context of its submit span into the run request
(:attr:`~tether.runs.contract.RunRequest.trace`): the request is stored with the run and travels
in the Celery message, so the worker that applies the run (whichever drain reaches it, on
whichever worker, after any number of redeliveries) continues the producer's trace.

Only ``opentelemetry-api`` is required. With no SDK configured every span is a no-op and no
context is written into requests; configure a ``TracerProvider`` (e.g. run under
``opentelemetry-instrument``) in the producer and the workers to export spans.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from functools import wraps
from typing import Any, ParamSpec, Protocol, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, Tracer
from opentelemetry.util.types import AttributeValue

TRACER_NAME = "tether"

P = ParamSpec("P")
R = TypeVar("R")


def tracer() -> Tracer:
    """Tether's tracer (a proxy until an SDK sets the provider)."""
    return trace.get_tracer(TRACER_NAME)


def _attributes(values: Mapping[str, AttributeValue | None]) -> dict[str, AttributeValue]:
    return {k: v for k, v in values.items() if v is not None}


@contextmanager
def span(
    name: str,
    attributes: Mapping[str, AttributeValue | None] | None = None,
    **tether: AttributeValue | None,
) -> Iterator[Span]:
    """A span around the block, child of the current one (an exception is recorded on it).

    ``attributes`` are set as named; keyword arguments become ``tether.<name>`` attributes.
    None values are left out.
    """
    attrs = _attributes({**(attributes or {}), **{f"tether.{k}": v for k, v in tether.items()}})
    with tracer().start_as_current_span(name, attributes=attrs) as current:
        yield current


def traced(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function to run inside a span called ``name``."""

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        @wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with tracer().start_as_current_span(name):
                return func(*args, **kwargs)

        return wrapper

    return decorate


def traced_async(
    name: str,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Decorate a coroutine function to run inside a span called ``name``."""

    def decorate(func: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        @wraps(func)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with tracer().start_as_current_span(name):
                return await func(*args, **kwargs)

        return wrapper

    return decorate


def current_trace_context() -> dict[str, str] | None:
    """The current span's context as W3C headers (``traceparent``, ``tracestate``), or None
    when nothing is being traced."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


class Usage(Protocol):
    """Token counts of a model call."""

    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...


def record_usage(current: Span, usage: Usage) -> None:
    """Put a model call's token usage on its span (OpenTelemetry's GenAI attribute names)."""
    current.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
    current.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)


class TracedRun(Protocol):
    """What :func:`run_span` reads of a run request."""

    @property
    def run_id(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def agent(self) -> str: ...
    @property
    def submitted_at_ms(self) -> int: ...
    @property
    def trace(self) -> dict[str, str] | None: ...


@contextmanager
def run_span(request: TracedRun, attempt: int) -> Iterator[Span]:
    """The ``tether.run`` span of one attempt, in the submitter's trace, after a
    ``tether.queue_wait`` span from submission to now."""
    parent = propagate.extract(request.trace) if request.trace else otel_context.get_current()
    attrs = _attributes(
        {
            "tether.run_id": request.run_id,
            "tether.tenant": request.tenant,
            "tether.session_id": request.session_id,
            "tether.agent": request.agent,
            "tether.attempt": attempt,
        }
    )
    now_ns = time.time_ns()
    submitted_ns = min(request.submitted_at_ms * 1_000_000, now_ns)
    wait = tracer().start_span(
        "tether.queue_wait", context=parent, start_time=submitted_ns, attributes=attrs
    )
    wait.end(end_time=now_ns)
    with tracer().start_as_current_span("tether.run", context=parent, attributes=attrs) as run:
        yield run
