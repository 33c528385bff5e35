"""Executing one run on the session its drain holds: the agent loop under what watches the run
(its stop check, step checkpoints, the guardian's deadline, model-budget waits, streamed
pieces), and the record of how it ended (returned, stopped, failed), applied to the session.

Nothing here writes the head: the attempt commits what :func:`execute` returns
(:mod:`tether.worker.engine.attempt`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from tether.core.context import CompactResult
from tether.core.events import now_ms
from tether.core.memory import MemorySnapshot
from tether.core.results import PendingCall, RunStatus
from tether.core.snapshot import MAX_APPLIED_RECORDS, RunRecord
from tether.errors import (
    BudgetExceeded,
    ConflictError,
    InfrastructureError,
    RunCancelled,
    RunHandedBack,
    RunInterrupted,
)
from tether.observability.tracing import current_trace_context
from tether.runs.contract import RunRequest
from tether.runs.limits.gate import budget_tenant, budget_waits
from tether.runs.usage.base import has_tokens
from tether.runtime.agent import Agent
from tether.runtime.children import child_spawning
from tether.runtime.session import AgentSession
from tether.runtime.timers import wait_limit
from tether.settings import Settings
from tether.worker.engine.deltas import RunDeltaStream
from tether.worker.engine.drain_state import DrainState
from tether.worker.engine.records import (
    applied_record,
    interrupted_record,
    redacted,
    redacted_pending,
    rolled_back_record,
)
from tether.worker.engine.resume import Checkpointer, Resumed
from tether.worker.engine.signal_wakes import SignalScope
from tether.worker.engine.spawner import WorkerSpawner, failed_calls, mark_child
from tether.worker.engine.spend import run_steps, run_usage, spend_check
from tether.worker.engine.stops import RunStops
from tether.worker.engine.waiting_runs import cancelled_record, cancels_only, longest_wait
from tether.worker.engine.waits import WaitNotice


@dataclass(frozen=True)
class Executed:
    """How one execution ended."""

    record: RunRecord
    """The record applied to the session (redacted)."""
    pending: tuple[PendingCall, ...]
    """The calls the run waits on (when it ended ``WAITING``), redacted."""
    checkpointed: bool
    """The run saved a step checkpoint (its commit clears it)."""


@dataclass(frozen=True)
class Execution:
    """One run about to execute on its session, with what watches it."""

    session: AgentSession
    request: RunRequest
    agent: Agent
    first_seq: int
    before: tuple[MemorySnapshot, CompactResult | None]
    """Memory before the run (what a failed or cancelled run rolls back to)."""
    resumed: Resumed | None
    """The checkpoint the session was rebuilt at (None: the run starts from the head)."""
    checkpointer: Checkpointer | None
    stops: RunStops
    timeout_s: float
    deltas: RunDeltaStream | None
    d_settings: Settings
    spawner: WorkerSpawner | None = None


def execute(d: DrainState, session: AgentSession, request: RunRequest, agent: Agent) -> Executed:
    """Run (or resume) the agent on ``session``; the record of how it ended, applied to it.

    Raises:
        RunHandedBack: the worker is shutting down and the run stopped at a checkpoint.
        ConflictError: the lease or the stream was lost (nothing may be committed).
        InfrastructureError: a backend failed under the run (it is retried).
    """
    run = _prepared(d, session, request, agent)
    d.services.guard.watch(d.lease, request.run_id, time.time() + run.timeout_s)
    notice = WaitNotice(d.services.runs, request.ref, time.monotonic() + run.timeout_s)
    listening = budget_waits.set(notice)
    sharing = budget_tenant.set(request.tenant)
    # its TOOL_CALL and STEP_END events wait for the checkpoint marked right after them
    d.publisher.marking = run.checkpointer is not None and d.services.step_marks is not None
    signals = SignalScope(d.services.signals, session, request)
    try:
        with signals.reading(run.first_seq):
            if run.resumed is None:  # a resumed run settled its calls before
                run = dataclasses.replace(run, request=signals.settled(request))
            record, pending = _ended(run)
    except BaseException:
        d.publisher.forget_pending()
        raise
    finally:
        d.publisher.marking = False
        budget_tenant.reset(sharing)
        budget_waits.reset(listening)
        notice.done()
    # a checkpoint still deferred goes with the commit's flush
    saved = run.checkpointer is not None and (run.checkpointer.saved or run.checkpointer.pending)
    return Executed(_applied(run, record), pending, checkpointed=saved)


def _prepared(d: DrainState, session: AgentSession, request: RunRequest, agent: Agent) -> Execution:
    """Where the run starts (the head, or its last checkpoint), its metadata on the session,
    and what watches it."""
    resumed = d.start_execution()
    first_seq = resumed.progress.first_seq if resumed else session.last_seq + 1
    before = resumed.before if resumed else (session.memory_snapshot(), session.last_compact)
    for key, value in request.metadata.items():
        session.put_metadata(key, value)
    services, settings = d.services, d.services.settings
    durability = request.durability or agent.options.durability
    checkpointer = (
        Checkpointer(services, d.lease, d.publisher, session, request.run_id, d.base_seq)
        if durability == "step"
        else None
    )
    begun_by_claim = d.applying is not None and d.applying.begun
    spend = spend_check(
        settings, services.runs.tenant_usage, request.tenant, agent.model_name, session, first_seq
    )
    stops = RunStops(d, request, checkpointer, begun_by_claim and resumed is None, spend)
    timeout_s = min(request.timeout_s or settings.max_run_s, settings.max_run_s)
    publisher = services.deltas
    deltas = None if publisher is None else RunDeltaStream(publisher, d.lease, request.run_id)
    if deltas is not None and services.step_marks is not None:
        # a model call's last pieces ride with the append of its MODEL_RESPONSE
        d.publisher.carrier, deltas.carry = services.step_marks, d.publisher.carry
    return Execution(
        session,
        request,
        agent,
        first_seq,
        before,
        resumed,
        checkpointer,
        stops,
        timeout_s,
        deltas,
        settings,
        WorkerSpawner(services, request, current_trace_context()),
    )


def _ended(run: Execution) -> tuple[RunRecord, tuple[PendingCall, ...]]:
    """Run the agent loop: the record of how it ended, and the calls it waits on."""
    session, request, first_seq = run.session, run.request, run.first_seq
    before = run.before
    try:
        if request.resolutions and run.resumed is None:  # a resumed run settled them before
            before = _settled(run)
            if (
                run.checkpointer is not None
            ):  # a crash from here on resumes past it, never reruns it
                run.checkpointer()
        mark_child(session, request)
        if cancels_only(request):  # the parked calls are cancelled: the run ends there
            return cancelled_record(request, session, first_seq), ()
        with (
            wait_limit(*longest_wait(run.d_settings, request.tenant)),
            child_spawning(run.spawner),
        ):
            result = session.run(
                request.input,
                run_id=request.run_id,
                cancel_check=run.stops,
                timeout_s=run.timeout_s,
                checkpoint=run.checkpointer,
                resume=run.resumed.progress if run.resumed else None,
                on_delta=run.deltas,
                request_id=request.request_id,
            )
        # children no call waited on: now, unless their call failed or the run was stopped
        if run.spawner is not None and result.status not in (RunStatus.CANCELLED, RunStatus.FAILED):
            run.spawner.flush(failed_calls(session, request.run_id))
        return applied_record(request, result, first_seq), redacted_pending(
            result.pending, run.agent
        )
    except RunHandedBack:
        raise
    except BudgetExceeded as exc:  # at a step boundary: the finished steps stay
        record = interrupted_record(request, session, first_seq, exc, RunStatus.FAILED)
        return record.model_copy(update={"steps": run_steps(session, first_seq)}), ()
    except RunCancelled as exc:
        return _stopped(run, before, exc), ()
    except (InfrastructureError, ConflictError):
        raise
    except Exception as exc:  # the agent failed: record it once, never retry
        failed = rolled_back_record(session, request, before, first_seq, RunStatus.FAILED, exc)
        return failed, ()


def _settled(run: Execution) -> tuple[MemorySnapshot, CompactResult | None]:
    """Settle the pending calls the continuation answers; the memory a rollback of what follows
    goes back to: an approved tool has run, so a rollback keeps its settlement, or the call
    would be pending again and a second approval would run it again."""
    session, request = run.session, run.request
    session.resolve(request.resolutions, run_id=request.run_id, request_id=request.request_id)
    return session.memory_snapshot(), session.last_compact


def _stopped(
    run: Execution, before: tuple[MemorySnapshot, CompactResult | None], exc: RunCancelled
) -> RunRecord:
    """The record of a run stopped on request: an interrupt keeps its finished steps, a cancel
    rolls them back.

    Raises:
        ConflictError: it stopped because the lease or the stream was lost.
    """
    request = run.request
    if run.stops.lost():
        raise ConflictError(f"lease or stream lost during run {request.run_id}") from exc
    if isinstance(exc, RunInterrupted):  # its finished steps stay: no rollback
        return interrupted_record(request, run.session, run.first_seq, exc)
    return rolled_back_record(run.session, request, before, run.first_seq, RunStatus.CANCELLED, exc)


def _applied(run: Execution, record: RunRecord) -> RunRecord:
    """``record`` completed (where the run ended, when, what it used) and redacted, applied to
    the session."""
    session = run.session
    record = record.model_copy(update={"last_seq": session.last_seq, "finished_at_ms": now_ms()})
    if not has_tokens(record.usage):  # it ended early: its model calls were spent all the same
        record = record.model_copy(update={"usage": run_usage(session, run.first_seq)})
    record = redacted(record, run.agent)
    session.record_applied(record, keep=MAX_APPLIED_RECORDS)
    return record
