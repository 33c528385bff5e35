"""The restore → run → save cycle, applied to one session's queue under its lease.

:func:`drain` takes the session lease (fencing token included), then applies the session's queued
runs in order. For each run it loads the snapshot head (once per lease; later runs reuse the
session it already holds), skips a request id the head already applied, runs the agent while
publishing events to the stream (fenced), then commits: the head is written with compare-and-set
(with the run's events as outbox), the outbox archived, and only then the run record finished
and popped from the queue. Any failure before the head write leaves the run queued for another
attempt; a zombie worker (lease lost) fails the head's compare-and-set and the stream's fence, so
it cannot overwrite newer state.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Literal

from shared.agent import Agent
from shared.context import CompactResult
from shared.errors import (
    ConflictError,
    DataError,
    InfrastructureError,
    RetriesExhausted,
    RunCancelled,
    TetherError,
    UnknownAgent,
)
from shared.events import AgentEvent, EventType, now_ms
from shared.lease import Lease
from shared.memory import MemorySnapshot
from shared.persistence import save_session
from shared.results import AgentResult, RunStatus
from shared.runs import RunRequest, RunResult
from shared.session import AgentSession
from shared.snapshot import MAX_APPLIED_RECORDS, RunRecord
from worker.lease_keeper import LeaseKeeper
from worker.runtime import Runtime

log = logging.getLogger(__name__)

#: Stop taking new runs from one session after this long, so one busy session cannot hold a
#: worker forever; the rest of its queue is handed to a fresh drain task.
DRAIN_BUDGET_S = 30.0
#: Flush buffered events to the stream before anything that may block (FINAL_OUTPUT is always
#: followed at once by STEP_END, which flushes both).
_FLUSH_ON = frozenset(
    {
        EventType.MODEL_REQUEST,
        EventType.TOOL_CALL,
        EventType.STEP_END,
        EventType.ERROR,
    }
)

Outcome = Literal["done", "abort", "handover"]


class StreamPublisher:
    """A session listener that appends its events to the live stream under the lease's fence."""

    def __init__(self, rt: Runtime, lease: Lease) -> None:
        self._rt = rt
        self._lease = lease
        self._buffer: list[AgentEvent] = []
        self.failed: TetherError | None = None

    def __call__(self, event: AgentEvent) -> None:
        self._buffer.append(event)
        if event.type in _FLUSH_ON:
            self.flush()

    def flush(self) -> None:
        """Append buffered events; remember (not raise) a failure so the run can stop cleanly."""
        if not self._buffer or self.failed is not None:
            return
        batch, self._buffer = self._buffer, []
        try:
            self._rt.stream.append(
                self._lease.tenant, self._lease.session_id, batch, self._lease.fence
            )
        except TetherError as exc:
            log.warning("stream append failed for %s: %s", self._lease.session_id, exc)
            self.failed = exc


@dataclass
class _Held:
    """The session a drain holds between runs (valid only while its lease is)."""

    session: AgentSession | None = None
    agent_name: str | None = None
    loaded: bool = False
    publisher: StreamPublisher | None = None
    processed: int = field(default=0)


def drain(rt: Runtime, tenant: str, session_id: str) -> int:
    """Apply the session's queued runs; return how many were finished (0 when the lease is busy)."""
    ttl_ms = rt.settings.lease_ttl_ms
    lease = rt.leases.acquire(tenant, session_id, rt.worker_id, ttl_ms)
    if lease is None:
        return 0
    keeper = LeaseKeeper(rt.leases, lease, ttl_ms).start()
    held = _Held(publisher=StreamPublisher(rt, lease))
    released = False
    hand_over = False
    started = time.monotonic()
    try:
        while not keeper.lost:
            run_id = rt.runbook.pending_head(tenant, session_id)
            if run_id is None:
                if rt.runbook.release_if_idle(lease) != 0:
                    released = True
                    break
                continue
            if time.monotonic() - started > DRAIN_BUDGET_S:
                hand_over = True
                break
            outcome = _apply_one(rt, lease, keeper, held, run_id)
            if outcome == "handover":
                hand_over = True
                break
            if outcome == "abort":
                break
            held.processed += 1
    finally:
        keeper.stop()
        if not released:
            try:
                rt.leases.release(lease)
            except TetherError as exc:  # it expires by itself; recovery does not depend on this
                log.warning("could not release lease of %s/%s: %s", tenant, session_id, exc)
    if hand_over:  # only once the lease is free, or the next drain would find it held
        _hand_over(rt, tenant, session_id)
    return held.processed


def _hand_over(rt: Runtime, tenant: str, session_id: str) -> None:
    from worker.tasks import enqueue_drain

    enqueue_drain(tenant, session_id)


def _apply_one(rt: Runtime, lease: Lease, keeper: LeaseKeeper, held: _Held, run_id: str) -> Outcome:
    view = rt.runbook.get(run_id)
    if view is None or view.request is None:
        log.warning("dropping queued run %s without a record", run_id)
        rt.runbook.drop_pending(lease.tenant, lease.session_id, run_id)
        return "done"
    if view.result is not None:  # finished before a crash popped it
        rt.runbook.finish(view.result)
        return "done"
    request = view.request
    if rt.runbook.cancel_requested(run_id):
        rt.runbook.finish(
            _rejected(request, RunStatus.CANCELLED, "RunCancelled", "cancelled before it started")
        )
        return "done"
    if view.retry_at_ms > now_ms():
        # an infrastructure failure a moment ago: let the sweeper retry after the backoff rather
        # than burn every attempt in a burst of drains (one per queued message of the session)
        return "abort"
    try:
        agent = rt.registry.get(request.agent)
    except UnknownAgent as exc:
        if view.queue and view.queue != rt.settings.queue:
            # submitted to another queue, whose workers know this agent: hand the session over
            log.info("run %s is for queue %s; handing the session over", run_id, view.queue)
            return "handover"
        rt.runbook.finish(_rejected(request, RunStatus.FAILED, exc.error_type, str(exc)))
        return "done"
    attempts = rt.runbook.incr_attempts(run_id)
    if attempts > rt.settings.max_attempts:
        cause = f"; last error: {view.last_error}" if view.last_error else ""
        message = (
            f"run {run_id} was attempted {attempts - 1} times without committing{cause}; see "
            "the worker logs, fix the cause and submit it again"
        )
        rt.runbook.finish(_rejected(request, RunStatus.FAILED, RetriesExhausted.__name__, message))
        return "done"
    rt.runbook.mark_running(run_id, rt.worker_id)
    try:
        return _run_and_commit(rt, lease, keeper, held, request, agent, attempts)
    except (InfrastructureError, ConflictError) as exc:
        log.warning("run %s attempt %d aborted, will retry: %s", run_id, attempts, exc)
        held.session = None
        held.loaded = False
        backoff_ms = rt.settings.lease_ttl_ms if isinstance(exc, InfrastructureError) else 0
        try:
            rt.runbook.note_failure(run_id, f"{exc.error_type}: {exc}", retry_after_ms=backoff_ms)
        except TetherError as note_exc:  # Redis away too: the attempt is retried regardless
            log.warning("could not record the failure of run %s: %s", run_id, note_exc)
        return "abort"


def _adopt(held: _Held, session: AgentSession, agent_name: str) -> AgentSession:
    """Make ``session`` the held one, publishing from now on (its restore event included)."""
    assert held.publisher is not None
    session.add_listener(held.publisher)
    if session.events and session.events[-1].type is EventType.SESSION_RESTORED:
        held.publisher(session.events[-1])
    held.session, held.agent_name = session, agent_name
    return session


def _session_for(rt: Runtime, held: _Held, request: RunRequest, agent: Agent) -> AgentSession:
    """The session to run on: loaded once per lease, then kept between runs."""
    if not held.loaded:
        stored = rt.store.load(request.tenant, request.session_id)
        held.loaded = True
        if stored is None:
            return _adopt(
                held, agent.new_session(request.session_id, tenant=request.tenant), request.agent
            )
        session = agent.session_from_snapshot(
            stored.snapshot, version=stored.version, by_reference=True, copy=False
        )
        session.mark_archived(stored.snapshot.archived_seq)
        return _adopt(held, session, request.agent)
    previous = held.session
    assert previous is not None
    if held.agent_name == request.agent:
        return previous
    session = agent.session_from_snapshot(
        previous.snapshot(), version=previous.version, by_reference=True
    )
    session.mark_archived(previous.archived_seq)
    return _adopt(held, session, request.agent)


def _run_and_commit(
    rt: Runtime,
    lease: Lease,
    keeper: LeaseKeeper,
    held: _Held,
    request: RunRequest,
    agent: Agent,
    attempts: int,
) -> Outcome:
    try:
        session = _session_for(rt, held, request, agent)
    except DataError as exc:
        # the stored head is unreadable (corrupt, or a schema version this build does not
        # know): retrying cannot help and writing would destroy it, so fail the run, touch nothing
        log.error("run %s failed: session head unreadable: %s", request.run_id, exc)
        failed = _rejected(request, RunStatus.FAILED, exc.error_type, str(exc))
        rt.runbook.finish(failed.model_copy(update={"attempts": attempts}))
        return "done"
    applied = session.find_applied(request.request_id)
    if applied is not None:  # redelivered after it committed
        rt.runbook.finish(_from_record(request, applied, duplicate=True, attempts=attempts))
        return "done"
    publisher = held.publisher
    assert publisher is not None
    first_seq = session.last_seq + 1
    memory_before, compact_before = session.memory_snapshot(), session.last_compact
    if request.metadata:
        for key, value in request.metadata.items():
            session.put_metadata(key, value)
    started_ms = now_ms()

    def should_stop() -> bool:
        return (
            keeper.lost
            or publisher.failed is not None
            or rt.runbook.cancel_requested(request.run_id)
        )

    timeout_s = min(request.timeout_s or rt.settings.max_run_s, rt.settings.max_run_s)
    try:
        result = session.run(
            request.input, run_id=request.run_id, cancel_check=should_stop, timeout_s=timeout_s
        )
        record = _record(request, result, first_seq)
    except RunCancelled as exc:
        if keeper.lost or publisher.failed is not None:
            raise ConflictError(f"lease or stream lost during run {request.run_id}") from exc
        record = _failed_record(
            session, request, memory_before, compact_before, first_seq, RunStatus.CANCELLED, exc
        )
    except (InfrastructureError, ConflictError):
        raise
    except Exception as exc:  # the agent failed: record it once, never retry
        record = _failed_record(
            session, request, memory_before, compact_before, first_seq, RunStatus.FAILED, exc
        )
    record = record.model_copy(update={"last_seq": session.last_seq, "finished_at_ms": now_ms()})
    record = _redacted(record, agent)
    session.record_applied(record, keep=MAX_APPLIED_RECORDS)
    publisher.flush()
    if publisher.failed is not None or keeper.lost:
        raise ConflictError(f"lease or stream lost before committing run {request.run_id}")
    save_session(session, rt.store, rt.archive, hint=rt.archive_hint)
    session.prune_events(session.archived_seq)
    rt.runbook.finish(
        _from_record(
            request,
            record,
            duplicate=False,
            attempts=attempts,
            queue_ms=max(0, started_ms - request.submitted_at_ms),
            run_ms=now_ms() - started_ms,
            worker=rt.worker_id,
        )
    )
    return "done"


def _redacted(record: RunRecord, agent: Agent) -> RunRecord:
    """The record with the agent's redaction applied to its output and error message (the
    head and the run result keep them, like events)."""
    redact = agent.redact
    if redact is None:
        return record
    return record.model_copy(
        update={
            "output": None if record.output is None else redact(record.output),
            "error_message": None if record.error_message is None else redact(record.error_message),
        }
    )


def _failed_record(
    session: AgentSession,
    request: RunRequest,
    memory_before: MemorySnapshot,
    compact_before: CompactResult | None,
    first_seq: int,
    status: RunStatus,
    exc: BaseException,
) -> RunRecord:
    """Roll memory back to before the run and describe the failure."""
    session.rollback(memory_before, compact_before, run_id=request.run_id)
    return RunRecord(
        request_id=request.request_id,
        run_id=request.run_id,
        status=status.value,
        error_type=type(exc).__name__,
        error_message=str(exc)[:2000],
        first_seq=first_seq,
    )


def _record(request: RunRequest, result: AgentResult, first_seq: int) -> RunRecord:
    return RunRecord(
        request_id=request.request_id,
        run_id=request.run_id,
        status=result.status.value,
        output=result.output,
        steps=result.steps,
        usage=result.usage,
        first_seq=first_seq,
        last_seq=result.last_seq,
    )


def _from_record(
    request: RunRequest,
    record: RunRecord,
    *,
    duplicate: bool,
    attempts: int,
    queue_ms: int = 0,
    run_ms: int = 0,
    worker: str | None = None,
) -> RunResult:
    return RunResult(
        run_id=request.run_id,
        request_id=request.request_id,
        session_id=request.session_id,
        tenant=request.tenant,
        status=RunStatus(record.status),
        output=record.output,
        steps=record.steps,
        usage=record.usage,
        error_type=record.error_type,
        error_message=record.error_message,
        first_seq=record.first_seq,
        last_seq=record.last_seq,
        duplicate=duplicate,
        attempts=attempts,
        queue_ms=queue_ms,
        run_ms=run_ms,
        worker=worker,
    )


def _rejected(request: RunRequest, status: RunStatus, error_type: str, message: str) -> RunResult:
    return RunResult(
        run_id=request.run_id,
        request_id=request.request_id,
        session_id=request.session_id,
        tenant=request.tenant,
        status=status,
        error_type=error_type,
        error_message=message,
    )
