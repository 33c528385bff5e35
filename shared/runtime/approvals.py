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

from tether.core.items import ToolCall, ToolCallsMessage, ToolOutput
from tether.core.results import Resolution
from tether.errors import InvalidInput
from tether.runtime.tool_runner import run_with_timeout
from tether.runtime.tools import (
    APPROVAL_OUTPUT,
    ToolContext,
    failed,
    tool_error_text,
)

if TYPE_CHECKING:
    from tether.runtime.session import AgentSession


def resolve_calls(
    session: AgentSession, resolutions: Sequence[Resolution], *, run_id: str
) -> None:
    """Apply ``resolutions`` in order (the caller holds the session lock).

    Raises:
        InvalidInput: a call is not pending, or is approved without waiting for approval.
    """
    for resolution in resolutions:
        call, output = _pending_call(session, resolution.call_id)
        if resolution.action == "output":
            text = resolution.text or ""
        elif output != APPROVAL_OUTPUT:
            raise InvalidInput(
                f"call {resolution.call_id!r} of session {session.session_id!r} does not wait "
                "for approval (already settled, or it waits for an output: give that instead, "
                "with submit_tool_output or `tether answer`)"
            )
        elif resolution.action == "reject":
            reason = resolution.text or "rejected by a person"
            text = tool_error_text(call, "Rejected", reason)
        else:
            text = _run_approved(session, call, run_id)
        session.replace_tool_output(call.id, text, run_id=run_id)


def _pending_call(session: AgentSession, call_id: str) -> tuple[ToolCall, str]:
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
        raise InvalidInput(
            f"call {call_id!r} is unknown in session {session.session_id!r}; see the WAITING "
            "run's result for the calls it waits on"
        )
    return call, output


def _run_approved(session: AgentSession, call: ToolCall, run_id: str) -> str:
    tool = session.agent.tools.get(call.name)
    if tool is None:
        return failed(call, "UnknownTool", f"no tool named {call.name!r}").output
    context = ToolContext(session.tenant, session.session_id, run_id, 0, call.id)
    outcome = run_with_timeout(tool, call, context, session.agent.options.tool_timeout_s)
    return outcome.output
