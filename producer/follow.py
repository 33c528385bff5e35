"""Following a run to its end across its pauses on the fleet (sans-IO, for both handles).

A run that parks a call on a timer (or a signal, or children) ends ``WAITING``; the fleet goes on
with it in a continuation whose run id derives from the parked call alone
(:func:`~tether.runs.waits.base.wake_run_id`), so a follower knows the next run before it exists.
``handle.result(follow=True)`` waits for the run, then, while its result is ``WAITING`` on the
fleet, for that continuation (registered when the wake is submitted: until then the follower
looks for it every :data:`LOOK_AGAIN_S`), and so on to the end. A run waiting for a person (an
approval, an output) ends the chain: that ``WAITING`` result is the answer.
"""

from __future__ import annotations

import time

from tether.core.results import RunStatus
from tether.runs.contract import RunResult
from tether.runs.waits.base import wake_run_id

#: How often a follower looks for a continuation not registered yet (s).
LOOK_AGAIN_S = 0.5


def next_run_id(result: RunResult) -> str | None:
    """The run the fleet goes on with after ``result`` (None: ``result`` is the end)."""
    if result.status is not RunStatus.WAITING:
        return None
    parked = [p for p in result.pending if p.wait_for is not None]
    if not parked:
        return None
    return wake_run_id(result.tenant, result.session_id, parked[0].call_id)


class Deadline:
    """What is left of a ``timeout`` (None: no limit)."""

    def __init__(self, timeout: float | None) -> None:
        self._until = None if timeout is None else time.monotonic() + timeout

    def left(self) -> float | None:
        """Seconds left (None: no limit).

        Raises:
            TimeoutError: none is left.
        """
        if self._until is None:
            return None
        left = self._until - time.monotonic()
        if left <= 0:
            raise TimeoutError("the run and its continuations did not finish in time")
        return left

    def pause(self) -> float:
        """How long to wait before looking again (never past the deadline)."""
        left = self.left()
        return LOOK_AGAIN_S if left is None else min(LOOK_AGAIN_S, left)
