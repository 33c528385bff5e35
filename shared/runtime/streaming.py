"""Where the agent loop hands the pieces of a streamed model answer.

When a run is given a :class:`RunDeltas` (a worker gives one per run) and the agent's model
implements :class:`~tether.models.base.StreamingModelClient`, the loop calls ``stream`` instead
of ``complete`` and passes each piece on with its step. ``step_done`` comes once the call has
returned or failed and before the step's ``MODEL_RESPONSE`` event is emitted, so everything
published for a step is out before the step's events. Without one (in-process use) the loop
calls ``complete`` as it always did.
"""

from __future__ import annotations

from typing import Protocol

from tether.models.base import ModelDelta


class RunDeltas(Protocol):
    """One run's sink for streamed pieces."""

    def piece(self, step: int, delta: ModelDelta) -> None:
        """One piece of the answer of ``step``'s model call (called on the run's thread)."""

    def step_done(self, step: int) -> None:
        """``step``'s model call is over: hand out what is pending before returning (never
        raise: pieces are for people watching, the run does not depend on them)."""
