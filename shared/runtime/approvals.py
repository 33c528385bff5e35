"""Settling the pending calls of a ``WAITING`` run: approve, reject, or give an output.

A call to a tool in ``AgentOptions.require_approval`` is not run: its result is the placeholder
``APPROVAL_REQUIRED`` and the run ends ``WAITING`` with the call in ``pending``. A tool that
returns :class:`~tether.runtime.tools.Waiting` parks its call the same way, waiting for an output
from outside. Each settlement is one ``TOOL_OUTPUT_REPLACED`` event (the event contract holds),
written under the run that goes on; approving runs the tool then, with a
:class:`~tether.runtime.tools.ToolContext` whose idempotency key is the same on every retry of
that run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether.core.events import EventType, ToolOutputReplacedPayload, ToolResultPayload
from tether.core.items import ToolCall, ToolCallsMessage, ToolOutput
from tether.core.results import Resolution
from tether.core.text import valid_text
from tether.errors import InvalidInput
from tether.runtime.signals import timeout_output
from tether.runtime.tool_runner import run_with_timeout
from tether.runtime.tools import (
    APPROVAL_OUTPUT,
    WAITING_OUTPUT,
    ToolContext,
    failed,
    tool_error_text,
)
from tether.runtime.waiting import parked_calls

if TYPE_CHECKING:
    from tether.runtime.session import AgentSession


def resolve_calls(
    session: AgentSession,
    resolutions: Sequence[Resolution],
    *,
    run_id: str,
    request_id: str | None = None,
) -> None:
    """Apply ``resolutions`` in order (the caller holds the session lock), once every one of
    them is known to settle a pending call (:func:`check_resolutions`): a refused request
    changes nothing.

    Raises:
        InvalidInput: a call is not pending, or is settled the wrong way.
    """
    check_resolutions(session, resolutions)
    for resolution in resolutions:
        call, _ = _latest_output(session, resolution.call_id)
        if resolution.action == "output":
            text = resolution.text or ""
        elif resolution.action == "reject":
            reason = resolution.text or "rejected by a person"
            text = tool_error_text(call, "Rejected", reason)
        elif resolution.action == "cancel":
            text = tool_error_text(call, "Cancelled", resolution.text or "the wait was cancelled")
        elif resolution.action == "interrupt":
            reason = resolution.text or "the wait was interrupted by a newer run"
            text = tool_error_text(call, "Interrupted", reason)
        elif resolution.action == "signal":  # no mailbox here (a worker's gives the signal)
            wait = parked_calls(session.memory_snapshot().items).get(call.id)
            text = timeout_output(wait.name if wait is not None and wait.name else call.name)
        else:
            text = _run_approved(session, call, run_id, request_id)
        session.replace_tool_output(call.id, text, run_id=run_id)


def check_resolutions(session: AgentSession, resolutions: Sequence[Resolution]) -> None:
    """Refuse ``resolutions`` unless each settles a call that is pending now, the way it waits:
    approve or reject a call waiting for approval, give the output of a call waiting for one,
    each call once. Reads only: nothing is written whatever the answer.

    Raises:
        InvalidInput: naming the call, the tenant and the session, and what to do instead.
    """
    parked = parked_calls(session.memory_snapshot().items)
    waiting = _waiting_for_output(session) | set(parked)
    settled: set[str] = set()
    for resolution in resolutions:
        call_id = resolution.call_id
        where = f"call {call_id!r} of session {session.tenant}/{session.session_id}"
        _, output = _latest_output(session, call_id)
        if call_id in settled:
            raise InvalidInput(f"{where} is settled twice in one request; settle it once")
        settled.add(call_id)
        if resolution.action in ("cancel", "interrupt") and (
            output == APPROVAL_OUTPUT or call_id in waiting
        ):
            continue  # any pending call may be cancelled or interrupted
        if resolution.action == "signal" and call_id in parked and parked[call_id].kind == "signal":
            continue  # the worker gives it its signal from the mailbox
        if output == APPROVAL_OUTPUT:
            if resolution.action == "output":
                raise InvalidInput(
                    f"{where} waits for a person's approval, not for an output: approve or "
                    "reject it (`tether approve` / `tether reject`)"
                )
        elif output == WAITING_OUTPUT or call_id in waiting:
            if resolution.action != "output":
                raise InvalidInput(
                    f"{where} does not wait for approval but for an output: give that instead, "
                    "with submit_tool_output or `tether answer`"
                )
        else:
            raise InvalidInput(
                f"{where} is not pending (it already has its result); only the calls a WAITING "
                "run lists in its result's `pending` can be settled"
            )


def _waiting_for_output(session: AgentSession) -> set[str]:
    """Calls whose newest result the session still holds as an event says ``WAITING`` (a
    ``Waiting`` tool with its own placeholder text), unless a later event replaced it."""
    waiting: set[str] = set()
    for event in session.events:
        payload = event.payload
        if event.type is EventType.TOOL_RESULT and isinstance(payload, ToolResultPayload):
            if payload.status == "WAITING" and payload.item.output != APPROVAL_OUTPUT:
                waiting.add(payload.item.call_id)
            else:
                waiting.discard(payload.item.call_id)
        elif isinstance(payload, ToolOutputReplacedPayload):
            waiting.discard(payload.call_id)
    return waiting


def _latest_output(session: AgentSession, call_id: str) -> tuple[ToolCall, str]:
    """The call and its current output (the newest one recorded for it)."""
    items = session.memory_snapshot().items
    output = next(
        (i.output for i in reversed(items) if isinstance(i, ToolOutput) and i.call_id == call_id),
        None,
    )
    call = next(
        (
            c
            for i in items
            if isinstance(i, ToolCallsMessage)
            for c in i.tool_calls
            if c.id == call_id
        ),
        None,
    )
    if call is None or output is None:
        where = f"{session.tenant}/{session.session_id}"
        if not items:
            raise InvalidInput(
                f"session {where} holds nothing (it does not exist, or no run wrote to it), so "
                f"no call {call_id!r} waits there; check the session id ('tether sessions list "
                f"--tenant {session.tenant}')"
            )
        raise InvalidInput(
            f"call {call_id!r} is unknown in session {where}; see the WAITING run's result for "
            "the calls it waits on"
        )
    return call, output


def _run_approved(
    session: AgentSession, call: ToolCall, run_id: str, request_id: str | None
) -> str:
    tool = session.agent.tools.get(call.name, session.tenant)
    if tool is None:
        return failed(call, "UnknownTool", f"no tool named {call.name!r}").output
    context = ToolContext(
        session.tenant, session.session_id, run_id, 0, call.id, request_id=request_id
    )
    outcome = run_with_timeout(tool, call, context, session.agent.options.tool_timeout_s)
    return valid_text(outcome.output)  # storable, as the loop makes every tool's output
