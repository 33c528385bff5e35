"""Conversions between a run's outcome, the record the session head keeps, and the run result.

The head keeps a :class:`~tether.core.snapshot.RunRecord` per applied request (what makes a
redelivered request a no-op); the run queue keeps a :class:`~tether.runs.contract.RunResult`.
"""

from __future__ import annotations

from tether.core.context import CompactResult
from tether.core.memory import MemorySnapshot
from tether.core.results import AgentResult, PendingCall, RunStatus
from tether.core.snapshot import RunRecord
from tether.errors import RetriesExhausted, TetherError
from tether.runs.contract import RunRequest, RunResult
from tether.runs.queue.base import RunView
from tether.runtime.agent import Agent
from tether.runtime.session import AgentSession


def applied_record(request: RunRequest, result: AgentResult, first_seq: int) -> RunRecord:
    """The head's record of a run that returned."""
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


def rolled_back_record(
    session: AgentSession,
    request: RunRequest,
    before: tuple[MemorySnapshot, CompactResult | None],
    first_seq: int,
    status: RunStatus,
    exc: BaseException,
) -> RunRecord:
    """Roll memory back to ``before`` the run and describe why it ended (failed, cancelled)."""
    memory, compact = before
    session.rollback(memory, compact, run_id=request.run_id)
    return RunRecord(
        request_id=request.request_id,
        run_id=request.run_id,
        status=status.value,
        error_type=type(exc).__name__,
        error_message=str(exc)[:2000],
        first_seq=first_seq,
    )


def interrupted_record(
    request: RunRequest,
    session: AgentSession,
    first_seq: int,
    exc: BaseException,
    status: RunStatus = RunStatus.INTERRUPTED,
) -> RunRecord:
    """A run stopped at a step boundary (for a newer one; ``FAILED``: its tenant's budget was
    spent): memory keeps what its finished steps wrote."""
    return RunRecord(
        request_id=request.request_id,
        run_id=request.run_id,
        status=status.value,
        error_type=type(exc).__name__,
        error_message=str(exc)[:2000],
        first_seq=first_seq,
        last_seq=session.last_seq,
    )


def redacted(record: RunRecord, agent: Agent) -> RunRecord:
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


def redacted_pending(pending: tuple[PendingCall, ...], agent: Agent) -> tuple[PendingCall, ...]:
    """``pending`` with the agent's redaction applied to each call's arguments, as to the
    ``TOOL_CALL`` event that asked for it: the run record, the result and its webhook keep them."""
    redact = agent.redact
    if redact is None:
        return pending
    return tuple(p.model_copy(update={"arguments": redact(p.arguments)}) for p in pending)


def result_from_record(
    request: RunRequest,
    record: RunRecord,
    *,
    duplicate: bool,
    attempts: int,
    queue_ms: int = 0,
    run_ms: int = 0,
    worker: str | None = None,
) -> RunResult:
    """The run result announced for a record (``duplicate``: it was applied before)."""
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


def retries_exhausted(
    request: RunRequest, attempts: int, view: RunView, now: TetherError | None = None
) -> RunResult:
    """The failure of a run that used up its attempt budget without committing."""
    last = f"{now.error_type}: {now}" if now is not None else view.last_error
    cause = f"; last error: {last}" if last else ""
    message = (
        f"run {request.run_id} was attempted {attempts - 1} times without committing{cause}; "
        "see the worker logs, fix the cause and submit it again"
    )
    # attempts: the ones made, not the one refused for lack of budget
    return RunResult.failure(
        request, RunStatus.FAILED, RetriesExhausted.__name__, message, attempts=attempts - 1
    )
