"""The step-checkpoint seam: how far a running attempt has got, fenced like a stream append.

With ``durability="step"`` a worker records, after each step boundary (the step's tool calls
decided, each tool result, each step's end), that the run's events up to ``last_seq`` are in the
session's live stream. The events themselves are already there (appended under the lease's
fence); a checkpoint is one small record, so it costs O(1) per step, not O(session). A worker
that takes over the run after a crash replays those events onto the committed head and goes on
from there: completed steps are not sent to the model again and completed tool calls are not run
again. The head is still written once, at the end of the run (the commit point).

A checkpoint is only as durable as the stream that holds its events: if Redis lost them (a flush,
a trimmed stream), the next attempt finds the checkpoint unusable, drops it and reruns the request
from the head, as ``durability="run"`` always does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from tether.core.events import AgentEvent
from tether.persistence.streams.redis import Rider, StreamMark


class Checkpoint(BaseModel):
    """One attempt's progress: events ``base_seq + 1 .. last_seq`` are in the stream."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: int = 1
    run_id: str
    fence: int = Field(ge=1)
    base_seq: int = Field(ge=0)
    """The committed head's ``last_seq`` the attempt started from."""
    last_seq: int = Field(ge=0)


class CheckpointStore(Protocol):
    """Per-run checkpoints of a session, fenced by the session's lease."""

    def save(self, tenant: str, session_id: str, checkpoint: Checkpoint) -> None:
        """Record ``checkpoint`` (replacing the run's previous one).

        Raises:
            FencedOut: a newer lease was granted since ``checkpoint.fence``; nothing written.
        """

    def load(self, tenant: str, session_id: str, run_id: str) -> Checkpoint | None:
        """The run's newest checkpoint, or None."""

    def clear(self, tenant: str, session_id: str, run_id: str) -> None:
        """Forget the run's checkpoint (it committed, or its events are gone)."""


class MarkingStream(Protocol):
    """A stream that appends a batch and records a run's step checkpoint in one script
    (:meth:`tether.persistence.streams.redis.RedisEventStream.append_marked`)."""

    def append_marked(
        self,
        tenant: str,
        session_id: str,
        events: Sequence[AgentEvent],
        fence: int,
        mark: StreamMark | None,
        riders: Sequence[Rider] = (),
    ) -> int: ...
