"""The continuation that wakes a parked call when its wake time comes, whoever submits it: the
fleet's sweeper at the due time, or an operator now (``Producer.wake``, ``tether wake``, the
console's wake button).

A wake is what the fleet does at the call's wake time: a timer is due (its output says when it
slept until and when it woke), a signal wait times out (settled from the session's mailbox when
the continuation runs: a signal that came first wins), a wait on children times out (their rows
as they are now, ``timed_out`` unless the wait is over). Its request id and run id derive from
the call alone (:func:`~tether.runs.waits.base.wake_request_id`), so a sweeper's wake, an
operator's and a double click are applied once: the run queue drops the duplicates.
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.core.children import ChildEnd, children_output, children_ready
from tether.core.results import Resolution
from tether.runs.contract import RunRequest
from tether.runs.waits.base import WaitRecord, settle_request
from tether.runtime.timers import timeout_output, timer_output


def wake_request(record: WaitRecord, woke_at_ms: int, *, output: str | None = None) -> RunRequest:
    """The continuation that settles ``record``'s call with ``output`` (by default a timer's:
    when it slept until; a signal's or children's: that their timeout passed) and runs on
    (:func:`~tether.runs.waits.base.settle_request`). A signal wait's, with no ``output``, is
    settled from the mailbox when it runs (a signal that came before the timeout wins)."""
    wait_for = record.wait_for
    if wait_for.kind == "signal" and output is None:
        # settled from the mailbox when it runs (tether.runs.signals.base.signal_wake's)
        resolution = Resolution(call_id=record.call_id, action="signal")
    else:
        due = timer_output if wait_for.kind == "timer" else timeout_output  # else: its timeout
        text = output if output is not None else due(wait_for, woke_at_ms)
        resolution = Resolution(call_id=record.call_id, action="output", text=text)
    return settle_request(
        record.tenant, record.session_id, record.agent, resolution, reply_to=record.reply_to
    )


def due_output(record: WaitRecord, ended: Mapping[str, ChildEnd]) -> str | None:
    """The output of a call parked on children whose wake time came (``ended``: the session's
    children's ends, its family record): every child's row as it is now, ``timed_out`` unless
    the wait is over; None for other waits (:func:`wake_request` gives theirs)."""
    wait_for = record.wait_for
    if wait_for.kind != "children":
        return None
    return children_output(wait_for, ended, timed_out=not children_ready(wait_for, ended))


def wake_now(record: WaitRecord, woke_at_ms: int, ended: Mapping[str, ChildEnd]) -> RunRequest:
    """The wake the fleet would submit at ``record``'s wake time, submitted at ``woke_at_ms``
    (an operator's wake: the same ids as the sweeper's, so only one is applied)."""
    return wake_request(record, woke_at_ms, output=due_output(record, ended))
