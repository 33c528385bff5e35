"""The mark a rerun's fork carries: which run it came from and from which step it goes on.

``tether rerun RUN_ID --from-step K`` forks the run's session at the boundary before step K (the
fork holds the run's steps 0..K-1 as recorded) and enqueues a run on the fork with the original
request. The fork's metadata attribute :data:`RERUN_ATTRIBUTE` holds a :class:`RerunMark`
naming that run's request id; a worker that starts the run with that request id goes on from
the recorded steps (``tether.worker.engine.resume``) instead of starting over, so no model call
and no tool call of steps 0..K-1 happens again. The mark stays in the fork's metadata: it
records where the fork came from.

Versions (field ``v``): 1, initial.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

RERUN_ATTRIBUTE = "tether.rerun"
"""The metadata attribute of a rerun's fork."""


class RerunMark(BaseModel):
    """Where a rerun's fork came from and which request goes on from its recorded steps."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    source_session_id: str
    source_run_id: str
    from_step: int = Field(ge=1)
    request_id: str
    """The request id of the run enqueued on the fork: the one that goes on at ``from_step``."""


def rerun_mark(attributes: Mapping[str, JsonValue]) -> RerunMark | None:
    """The mark in a session's metadata attributes, or None (absent or not a valid mark)."""
    raw = attributes.get(RERUN_ATTRIBUTE)
    if not isinstance(raw, dict):
        return None
    try:
        return RerunMark.model_validate(raw)
    except ValidationError:  # a hand-written attribute of that name is no mark: run as usual
        return None
