"""Cancelling a run parked on the fleet (sans-IO, for :class:`~tether.producer.client.Producer`
and its asyncio twin).

A run that parked a call on a timer (or a signal, or children) has ended ``WAITING``: there is
nothing running to stop. Its cancel is a continuation, registered like any run in the session's
queue, that settles each parked call with a ``Cancelled`` tool error and ends ``CANCELLED``
without a model call: durable in the session (so nothing wakes the call again, even after Redis
lost its index) and exactly once, because its request id is the call's wake id: whichever of the
wake and the cancel is registered first is the one applied, the other a duplicate.
"""

from __future__ import annotations

from tether.core.results import Resolution, RunStatus
from tether.runs.contract import RunRequest
from tether.runs.queue.base import RunView
from tether.runs.waits.base import settle_request


def cancel_requests(view: RunView | None, reply_to: str | None) -> list[RunRequest]:
    """The continuations cancelling the calls ``view``'s run parked on the fleet (none: the run
    is not ``WAITING`` on the fleet)."""
    result = view.result if view is not None else None
    if view is None or result is None or result.status is not RunStatus.WAITING:
        return []
    agent = view.request.agent if view.request is not None else None
    if agent is None:
        return []
    return [
        settle_request(
            view.tenant,
            view.session_id,
            agent,
            Resolution(call_id=p.call_id, action="cancel", text="cancelled by a person"),
            reply_to=reply_to,
        )
        for p in result.pending
        if p.wait_for is not None
    ]
