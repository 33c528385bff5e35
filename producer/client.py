"""Producer: enqueue runs on sessions and get future-like handles back.

>>> producer = Producer()                      # settings from TETHER_* variables
>>> result = producer.run("s-1", "remember milk", agent="notes")
>>> handle = producer.run_async("s-1", "recall", agent="notes")
>>> handle.result(timeout=30).output
'milk'
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from celery import Celery
from pydantic import JsonValue

from tether.core.events import AgentEvent
from tether.core.results import Resolution, RunStatus
from tether.errors import InvalidInput, SessionBusy
from tether.ids import new_id, validate_id, validate_tenant
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.persistence.streams.redis import RedisEventStream
from tether.producer.handle import RunHandle
from tether.producer.listener import CompletionListener
from tether.runs.celery_config import celery_config
from tether.runs.contract import (
    RUN_TASK,
    BusyPolicy,
    RunRequest,
    RunResult,
    describe_request,
    parse_request,
)
from tether.runs.queue.base import CancelOutcome, SubmitOutcome, SubmitState, preempt_for
from tether.runs.queue.redis import RedisRunQueue
from tether.settings import Settings, load_settings

if TYPE_CHECKING:
    from tether.producer.batch import BatchSummary, CasesSource



@dataclass(frozen=True)
class RunSpec:
    """One request for :meth:`Producer.submit_many`."""

    session_id: str
    input: str | None
    agent: str
    tenant: str | None = None
    request_id: str | None = None
    metadata: dict[str, JsonValue] = field(default_factory=dict)
    timeout_s: float | None = None
    on_busy: str = "enqueue"
    durability: str | None = None
    resolutions: tuple[Resolution, ...] = ()


class Producer:
    """Client of a Tether deployment (thread-safe; one per process is enough).

    Args:
        settings: settings (default: read from the environment).
        celery_app: an existing Celery app to publish with (default: one built from settings).
        **overrides: setting overrides, e.g. ``broker_url=...``, ``redis_url=...``.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        celery_app: Celery | None = None,
        **overrides: Any,
    ) -> None:
        self.settings = settings or load_settings(**overrides)
        self.keys = RedisKeys(self.settings.namespace)
        self.redis = redis_from_url(self.settings.effective_redis_url)
        self.runs = RedisRunQueue(self.redis, self.keys, result_ttl_s=self.settings.result_ttl_s)
        self.stream = RedisEventStream(self.redis, keys=self.keys)
        self._celery = celery_app
        self._celery_lock = threading.Lock()
        self._listener: CompletionListener | None = None

    # --- plumbing ----------------------------------------------------------------------------

    @property
    def celery(self) -> Celery:
        """The Celery app used to publish (built on first use)."""
        with self._celery_lock:
            if self._celery is None:
                app = Celery("tether-producer", set_as_current=False)
                app.conf.update(celery_config(self.settings))
                self._celery = app
            return self._celery

    @property
    def listener(self) -> CompletionListener:
        """The single completion listener of this producer."""
        with self._celery_lock:
            if self._listener is None:
                self._listener = CompletionListener(self.runs)
            return self._listener

    def close(self) -> None:
        """Stop the listener and close connections."""
        if self._listener is not None:
            self._listener.close()
        self.redis.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- submitting ----------------------------------------------------------------------------

    def _request(self, spec: RunSpec) -> RunRequest:
        run_id = new_id("run")
        doc = {
            "run_id": run_id,
            "request_id": run_id if spec.request_id is None else spec.request_id,
            "tenant": self.settings.tenant if spec.tenant is None else spec.tenant,
            "session_id": spec.session_id,
            "agent": spec.agent,
            "input": spec.input,
            "metadata": spec.metadata,
            "timeout_s": spec.timeout_s,
            "on_busy": spec.on_busy,
            "durability": spec.durability,
            "resolutions": [r.model_dump() for r in spec.resolutions],
        }
        request = parse_request(doc)
        request.check_input_size(self.settings.max_input_bytes)
        return request

    def _handle_for(self, request: RunRequest, outcome: SubmitOutcome) -> RunHandle:
        if outcome.state is SubmitState.BUSY:
            busy = SessionBusy(
                f"session {request.tenant}/{request.session_id} is running or has queued runs, "
                "and on_busy='reject' was asked; retry later or use on_busy='enqueue'"
            )
            result = RunResult.failure(request, RunStatus.FAILED, busy.error_type, str(busy))
            self.runs.record_rejected(result)
        return RunHandle(
            self,
            outcome.run_id,
            request_id=request.request_id,
            session_id=request.session_id,
            tenant=request.tenant,
        )

    def run_async(
        self,
        session_id: str,
        input: str | None,
        *,
        agent: str,
        tenant: str | None = None,
        request_id: str | None = None,
        metadata: dict[str, JsonValue] | None = None,
        timeout_s: float | None = None,
        on_busy: str = "enqueue",
        durability: str | None = None,
    ) -> RunHandle:
        """Enqueue a run; returns at once with its handle.

        Submitting a ``request_id`` that was already submitted returns a handle on the original
        run (the input is applied once). ``durability`` (``"step"`` or ``"run"``) overrides the
        agent's (see the README's long-running runs).

        Raises:
            InvalidInput: a malformed id, oversized input, or bad option (nothing is enqueued).
        """
        spec = RunSpec(
            session_id,
            input,
            agent,
            tenant,
            request_id,
            {} if metadata is None else metadata,  # validated, never coerced (dict("ab") fails)
            timeout_s,
            on_busy,
            durability,
        )
        return self.submit_many([spec])[0]

    # --- human in the loop ---------------------------------------------------------------------

    def resolve(
        self,
        session_id: str,
        resolutions: Iterable[Resolution],
        *,
        agent: str,
        tenant: str | None = None,
        request_id: str | None = None,
    ) -> RunHandle:
        """Continue the session's ``WAITING`` run, from any process: settle its pending calls
        (see :class:`~tether.core.results.Resolution`), then run on. Returns the continuation's
        handle (the waiting run's handle stays resolved with its ``WAITING`` result).

        Raises:
            InvalidInput: a malformed id or resolution (nothing is enqueued). A call id that is
                not pending fails the continuation run (``InvalidInput``); nothing changes.
        """
        spec = RunSpec(session_id, None, agent, tenant, request_id, resolutions=tuple(resolutions))
        return self.submit_many([spec])[0]

    def approve(
        self, session_id: str, call_id: str, *, agent: str, tenant: str | None = None
    ) -> RunHandle:
        """Approve a pending call: the tool runs, then the run goes on."""
        return self.resolve(
            session_id, [Resolution(call_id=call_id, action="approve")], agent=agent, tenant=tenant
        )

    def reject(
        self,
        session_id: str,
        call_id: str,
        reason: str = "rejected by a person",
        *,
        agent: str,
        tenant: str | None = None,
    ) -> RunHandle:
        """Refuse a pending call: the model sees ``reason``, then the run goes on."""
        resolution = Resolution(call_id=call_id, action="reject", text=reason)
        return self.resolve(session_id, [resolution], agent=agent, tenant=tenant)

    def submit_tool_output(
        self, session_id: str, call_id: str, output: str, *, agent: str, tenant: str | None = None
    ) -> RunHandle:
        """Give the output of a call that waits for one, then the run goes on."""
        resolution = Resolution(call_id=call_id, action="output", text=output)
        return self.resolve(session_id, [resolution], agent=agent, tenant=tenant)

    def run(
        self,
        session_id: str,
        input: str | None,
        *,
        agent: str,
        tenant: str | None = None,
        request_id: str | None = None,
        metadata: dict[str, JsonValue] | None = None,
        timeout_s: float | None = None,
        on_busy: str = "enqueue",
        wait_s: float | None = None,
        durability: str | None = None,
    ) -> RunResult:
        """Enqueue a run and wait for its result (see :meth:`RunHandle.result`)."""
        handle = self.run_async(
            session_id,
            input,
            agent=agent,
            tenant=tenant,
            request_id=request_id,
            metadata=metadata,
            timeout_s=timeout_s,
            on_busy=on_busy,
            durability=durability,
        )
        return handle.result(timeout=wait_s)

    def submit_many(self, specs: Iterable[RunSpec]) -> list[RunHandle]:
        """Enqueue many runs with one Redis round trip and one broker connection."""
        requests = [self._request(spec) for spec in specs]
        if not requests:
            return []
        outcomes = self.runs.submit_many(requests, queue=self.settings.queue)
        for request, outcome in zip(requests, outcomes, strict=True):
            if outcome.state is SubmitState.QUEUED:
                preempt_for(self.runs, request)
        app = self.celery
        with app.producer_or_acquire() as publisher:
            # kombu >= 5.7 pipelines the pushes of a batch into one Redis round trip
            batch = getattr(publisher, "batch", None)
            with batch() if batch is not None else contextlib.nullcontext():
                for request, outcome in zip(requests, outcomes, strict=True):
                    if outcome.state is SubmitState.QUEUED:
                        app.send_task(
                            RUN_TASK,
                            kwargs={"request": request.model_dump(mode="json")},
                            task_id=request.run_id,
                            queue=self.settings.queue,
                            producer=publisher,
                            # a short repr: Celery would otherwise render the whole request
                            # (input included) into the message headers
                            argsrepr="()",
                            kwargsrepr=describe_request(request),
                        )
        return [self._handle_for(r, o) for r, o in zip(requests, outcomes, strict=True)]

    def resubmit(self, run_id: str) -> None:
        """Publish the stored request of ``run_id`` again (harmless: it is idempotent)."""
        view = self.runs.get(run_id)
        if view is None or view.request is None:
            raise InvalidInput(f"run {run_id!r} is unknown or expired; nothing to resubmit")
        self.celery.send_task(
            RUN_TASK,
            kwargs={"request": view.request.model_dump(mode="json")},
            task_id=run_id,
            queue=self.settings.queue,
            argsrepr="()",
            kwargsrepr=describe_request(view.request),
        )

    def run_batch(
        self,
        cases: CasesSource,
        *,
        agent: str | None = None,
        concurrency: int = 8,
        out: str | os.PathLike[str] | None = None,
        batch_id: str | None = None,
        skip_invalid: bool = False,
        tenant: str | None = None,
        progress: bool = False,
    ) -> BatchSummary:
        """Run a batch of evaluation cases (a JSONL file or an iterable); re-running resumes.

        See :func:`tether.producer.batch.run_batch` for the arguments and the guarantees.
        """
        from tether.producer.batch import run_batch  # imported here: the batch engine imports us

        return run_batch(
            self,
            cases,
            agent=agent,
            concurrency=concurrency,
            out=out,
            batch_id=batch_id,
            skip_invalid=skip_invalid,
            tenant=tenant,
            progress=progress,
        )

    # --- following runs ------------------------------------------------------------------------

    def handle(self, run_id: str) -> RunHandle:
        """A handle on an existing run (from any process); does no I/O."""
        return RunHandle(self, validate_id(run_id, kind="run id"))

    def cancel(self, run_id: str) -> CancelOutcome:
        """Ask a run to stop. ``CANCELLED``: it was queued and will never start. ``REQUESTED``:
        it is running and stops at its next step boundary, unless it finishes first (its events
        stay in the log, followed by a rollback: nothing of it stays in memory). ``FINISHED``
        or ``UNKNOWN``: nothing changed."""
        return self.runs.request_cancel(validate_id(run_id, kind="run id"))

    def tail(
        self,
        session_id: str,
        tenant: str | None = None,
        after_seq: int = 0,
        *,
        idle_timeout_s: float | None = None,
    ) -> Iterator[AgentEvent]:
        """Follow a session's live events (resume with the last seen ``seq``)."""
        tenant = validate_tenant(tenant or self.settings.tenant)
        return self.stream.tail(
            tenant,
            validate_id(session_id),
            after_seq=after_seq,
            block_ms=1000,
            idle_timeout_s=idle_timeout_s,
        )


__all__ = ["BusyPolicy", "Producer", "RunHandle", "RunSpec"]
