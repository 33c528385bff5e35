"""The event-stream seam: the hot, live log of a session that clients tail.

Appends are *fenced*: each carries the writer's fencing token (from
:mod:`tether.runs.leases.base`). An append
whose token is older than the session's current one raises :class:`FencedOut` and appends nothing.
Sequence rules per session: under the same token, an append must continue at ``last_seq + 1``
(events at or below ``last_seq`` are skipped, which makes retried appends idempotent; a gap is an
error); a writer with a *newer* token may restart at any ``seq <= last_seq + 1`` (a retried run
replacing an abandoned attempt). Readers see, for each sequence number, the newest entry.
Implementations live in :mod:`tether.persistence.streams` (``memory``, ``redis``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

from tether.core.events import AgentEvent


@runtime_checkable
class EventStream(Protocol):
    """Per-session live event log."""

    def append(self, tenant: str, session_id: str, events: Sequence[AgentEvent], fence: int) -> int:
        """Append events (ascending ``seq``) under fencing token ``fence``; return the last seq."""

    def read(
        self, tenant: str, session_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[AgentEvent]:
        """Events with ``seq > after_seq`` currently in the stream, in order."""

    def tail(
        self,
        tenant: str,
        session_id: str,
        *,
        after_seq: int = 0,
        block_ms: int = 1000,
        idle_timeout_s: float | None = None,
    ) -> Iterator[AgentEvent]:
        """Yield events after ``after_seq`` as they arrive; stop after ``idle_timeout_s`` idle.

        Resuming with the last seen sequence gives no gaps and no duplicates. If a newer writer
        replaces an abandoned attempt, the replacement events are yielded too (their ``seq``
        goes back), so a consumer can tell that the earlier ones were never committed.
        """

    def trim(
        self,
        tenant: str,
        session_id: str,
        *,
        max_len: int | None = None,
        min_seq: int | None = None,
    ) -> int:
        """Drop old entries: keep the ``max_len`` newest and/or those with ``seq >= min_seq``.

        Returns the number dropped (approximate for Redis).
        """


@runtime_checkable
class CompactingStream(Protocol):
    """A stream that can give back the room it keeps for appends to come (Redis 7 keeps up to
    4 KB in each stream's newest node): a worker asks when a session goes idle."""

    def compact(self, tenant: str, session_id: str) -> bool:
        """Rewrite the session's stream without its slack, the same entries; whether it was."""
