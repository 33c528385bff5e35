"""Runs around a wait on the fleet: the longest wait a run's tools may take, and the
continuation that cancels or interrupts parked calls (it settles them with a ``Cancelled`` or
``Interrupted`` tool error and ends ``CANCELLED`` or ``INTERRUPTED`` without a model call)."""

from __future__ import annotations

from tether.core.items import ToolCallsMessage, ToolOutput
from tether.core.results import STOPPING_ACTIONS, PendingCall, RunStatus
from tether.core.snapshot import RunRecord
from tether.runs.contract import RunRequest
from tether.runs.usage.policy import max_wait_of
from tether.runtime.session import AgentSession
from tether.runtime.tools import APPROVAL_OUTPUT, WAITING_OUTPUT
from tether.settings import Settings


def longest_wait(settings: Settings, tenant: str) -> tuple[float, str]:
    """The longest a call of ``tenant``'s runs may park, and the setting that says so: the
    tenant's ``max_wait_s`` when it sets a lower one, else ``TETHER_MAX_WAIT_S``."""
    own = max_wait_of(settings, tenant)
    if 0 < own < settings.max_wait_s:
        return own, f"max_wait_s of tenant {tenant!r} in TETHER_TENANT_BUDGETS"
    return settings.max_wait_s, "TETHER_MAX_WAIT_S"


def cancels_only(request: RunRequest) -> bool:
    """Whether ``request`` only cancels or interrupts parked calls (the run then ends with
    them)."""
    return bool(request.resolutions) and all(
        r.action in STOPPING_ACTIONS for r in request.resolutions
    )


def cancelled_record(request: RunRequest, session: AgentSession, first_seq: int) -> RunRecord:
    """The record of a continuation that cancelled (or interrupted) its session's parked calls:
    memory keeps the settlement (so nothing wakes them again), and the run is ``CANCELLED``
    (``INTERRUPTED`` when every call was interrupted: a newer run superseded it)."""
    calls = ", ".join(r.call_id for r in request.resolutions)
    interrupted = all(r.action == "interrupt" for r in request.resolutions)
    status = RunStatus.INTERRUPTED if interrupted else RunStatus.CANCELLED
    reason = request.resolutions[0].text if interrupted else None
    return RunRecord(
        request_id=request.request_id,
        run_id=request.run_id,
        status=status.value,
        error_type="RunInterrupted" if interrupted else "RunCancelled",
        error_message=f"the waits of calls {calls} were "
        + (f"interrupted: {reason}" if interrupted and reason else "cancelled"),
        first_seq=first_seq,
        last_seq=session.last_seq,
    )


def pending_in(session: AgentSession) -> tuple[PendingCall, ...]:
    """The calls ``session`` waits on now (a placeholder output, or parked on the fleet): the
    ``pending`` of a ``WAITING`` run finished as found, whose loop state is gone."""
    items = session.memory_snapshot().items
    calls = {c.id: c for i in items if isinstance(i, ToolCallsMessage) for c in i.tool_calls}
    return tuple(
        PendingCall(
            call_id=i.call_id,
            tool=i.name,
            arguments=calls[i.call_id].arguments if i.call_id in calls else "{}",
            reason="approval" if i.output == APPROVAL_OUTPUT else "output",
            wait_for=i.wait_for,
        )
        for i in items
        if isinstance(i, ToolOutput)
        and (i.wait_for is not None or i.output in (WAITING_OUTPUT, APPROVAL_OUTPUT))
    )
