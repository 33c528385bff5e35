"""Calls parked on the fleet: timers from a tool (``ctx.sleep``) or from the model (the opt-in
``wait`` tool), the longest wait a run may take, and the calls a session's memory holds parked.

A tool parks its call by returning ``ctx.sleep(seconds)`` (a :class:`~tether.runtime.tools.Waiting`
whose ``wait_for`` is a timer). On a worker the run then ends ``WAITING`` and frees its worker
and lease; the fleet wakes it when the timer is due, with a continuation that gives the call its
output (:func:`timer_output`) and runs on (see ``docs/waiting.md``). In-process (no fleet), the
run ends ``WAITING`` the same way and ``session.submit_tool_output`` goes on with it.

The longest wait (``TETHER_MAX_WAIT_S``, or a tenant's ``max_wait_s``) is set around a run by
the worker (:func:`~tether.runtime.timers.wait_limit`); a sleep beyond it fails the call with a
message naming the limit, and nothing is parked.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from tether.core.items import Item, ToolCall, ToolOutput
from tether.core.results import PendingCall, ToolResultRecord
from tether.core.waits import WaitFor
from tether.errors import ToolError
from tether.runtime.timers import timer_output, wait_limit
from tether.runtime.tools import APPROVAL_OUTPUT, Tool, ToolContext, Waiting

__all__ = [
    "parked_calls",
    "pending_calls",
    "signal_tool",
    "timer_output",
    "wait_limit",
    "wait_tool",
]


def parked_calls(items: Sequence[Item]) -> dict[str, WaitFor]:
    """The calls ``items`` hold parked on the fleet (their output not given yet), by call id."""
    return {
        i.call_id: i.wait_for for i in items if isinstance(i, ToolOutput) and i.wait_for is not None
    }


def pending_calls(
    items: Sequence[Item], calls: Sequence[ToolCall], results: Sequence[ToolResultRecord]
) -> tuple[PendingCall, ...]:
    """The calls of a ``WAITING`` run whose latest result (of ``results``) is a placeholder,
    with their waits on the fleet (from memory, ``items``: a resumed run's state lacks its
    earlier results' waits)."""
    waits = parked_calls(items)
    by_id = {c.id: c for c in calls}
    latest = {r.call_id: r for r in results}
    return tuple(
        PendingCall(
            call_id=r.call_id,
            tool=r.name,
            arguments=by_id[r.call_id].arguments if r.call_id in by_id else "{}",
            reason="approval" if r.output == APPROVAL_OUTPUT else "output",
            wait_for=waits.get(r.call_id),
        )
        for r in latest.values()
        if r.status == "WAITING"
    )


def wait_tool(*, name: str = "wait", max_s: float | None = None) -> Tool:
    """The opt-in tool that lets the model wait: ``Agent(model, tools=[..., wait_tool()])``.

    The model calls it with ``seconds`` (and why, for the transcript); the run parks without a
    worker and goes on when the time has passed. ``max_s`` caps what the model may ask, below
    the run's own limit.
    """

    def wait(seconds: float, reason: str, ctx: ToolContext) -> Waiting:
        """Pause this task for `seconds` (e.g. to check on something later) without using
        resources; you are woken when the time has passed. Say why in `reason`."""
        if max_s is not None and seconds > max_s:
            raise ToolError(f"wait at most {max_s:g} s, not {seconds:g}")
        return ctx.sleep(seconds)

    return Tool(wait, name=name)


def signal_tool(
    *,
    name: str = "wait_for_signal",
    names: Collection[str] | None = None,
    max_s: float | None = None,
) -> Tool:
    """The opt-in tool that lets the model wait for a signal sent to its session
    (``Producer.signal``, ``tether signal``): ``Agent(model, tools=[..., signal_tool()])``.

    The model calls it with the signal's ``name`` and a ``timeout_s``; it gets the first signal
    of that name not consumed yet, at once or when one comes (the run parks without a worker
    meanwhile), or ``{"signal": name, "timed_out": true}``. ``names`` limits the names it may
    wait for; ``max_s`` caps its timeout, below the run's own limit.
    """
    allowed = None if names is None else frozenset(names)

    def wait_for_signal(signal: str, timeout_s: float, ctx: ToolContext) -> Waiting | str:
        """Wait for the signal named `signal` sent to this session (e.g. an approval, a job
        finishing), for at most `timeout_s` seconds, without using resources. Returns the
        signal's payload, or {"timed_out": true} when none came in time."""
        if allowed is not None and signal not in allowed:
            raise ToolError(f"wait for one of {sorted(allowed)}, not {signal!r}")
        if max_s is not None and timeout_s > max_s:
            raise ToolError(f"wait at most {max_s:g} s, not {timeout_s:g}")
        return ctx.wait_for_signal(signal, timeout_s)

    return Tool(wait_for_signal, name=name)
