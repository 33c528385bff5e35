"""The delta-channel seam: the model's answer in pieces, live, while a worker streams it.

A session's *delta channel* is ephemeral and bounded: it is never the durable log (the head,
the archive or the event stream); the committed ``MODEL_RESPONSE`` event stays the source of
truth. Each piece is a :class:`LiveDelta`, tagged with the run, the attempt's fencing token, the
step and its index in the step, so a reader can put it in place:

- the pieces of one step are published in order, all of them before that step's
  ``MODEL_RESPONSE`` event reaches the event stream, and after its ``MODEL_REQUEST``: two
  steps' pieces never interleave;
- a crash mid-stream redoes the step under a newer lease, so its pieces start again at index 0
  with a higher ``fence``; a reader drops the older attempt's partial text (see
  :class:`tether.persistence.deltas.live.LiveText`), and ignores pieces of an older fence that
  arrive late (a paused worker's).

Every append bounds the channel to about ``max_len`` entries and makes it expire ``ttl_ms`` after
the last append. Implementations: :mod:`tether.persistence.deltas.memory` and
:mod:`tether.persistence.deltas.redis`; both pass ``tests/test_delta_channel_contract.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

DeltaKind = Literal["text", "tool_arguments"]
#: A position in a channel: entries after it are newer ("0-0": before the first).
Cursor = str
START: Cursor = "0-0"


@dataclass(frozen=True, slots=True)
class LiveDelta:
    """One piece of a model's answer, as a reader gets it.

    Attributes:
        run_id: the run whose model call streamed it.
        fence: the attempt's fencing token (a redo of the step has a higher one).
        step: the step of the run.
        index: its place among the step's pieces of this attempt, from 0 (an entry that joins
            several consecutive pieces, published together, has the index of its first).
        kind: ``text`` (the answer's text) or ``tool_arguments`` (a call's JSON arguments).
        text: the new characters.
        call_index: which tool call of the answer the arguments belong to.
        call_id: the call's id, on the first piece of a call when the model sent it.
        tool_name: the tool's name, on the first piece of a call when the model sent it.
    """

    run_id: str
    fence: int
    step: int
    index: int
    kind: DeltaKind
    text: str
    call_index: int = 0
    call_id: str | None = None
    tool_name: str | None = None

    def same_step(self, other: LiveDelta) -> bool:
        """Whether ``other`` is a piece of the same attempt's same step."""
        return (self.run_id, self.fence, self.step) == (other.run_id, other.fence, other.step)


@runtime_checkable
class DeltaChannel(Protocol):
    """Per-session channel of live pieces (ephemeral, bounded, expiring)."""

    def publish(self, tenant: str, session_id: str, deltas: Sequence[LiveDelta]) -> None:
        """Append ``deltas`` in order (one round trip); bound and refresh the channel."""

    def read(
        self, tenant: str, session_id: str, *, after: Cursor = START, limit: int | None = None
    ) -> list[tuple[Cursor, LiveDelta]]:
        """The entries after ``after``, oldest first, at most ``limit``."""

    def current_step(self, tenant: str, session_id: str) -> tuple[list[LiveDelta], Cursor]:
        """The pieces of the newest step so far, from its first one still in the channel, and
        the cursor of the newest entry (:data:`START` when empty): a reader attaching
        mid-step shows these, then follows from the cursor."""

    def follow(
        self,
        tenant: str,
        session_id: str,
        *,
        after: Cursor = START,
        block_ms: int = 1000,
        idle_timeout_s: float | None = None,
    ) -> Iterator[tuple[Cursor, LiveDelta]]:
        """Yield entries after ``after`` as they arrive; stop after ``idle_timeout_s`` idle."""

    def length(self, tenant: str, session_id: str) -> int:
        """How many entries the channel holds now."""

    def ttl_ms(self, tenant: str, session_id: str) -> int | None:
        """Milliseconds until the channel expires (None: it does not exist)."""
