"""In-process delta channel with the Redis one's semantics (tests, in-process engines).

Entries are kept in a bounded deque per session (exactly ``max_len``, where Redis trims about
that many); a channel nobody appended to for ``ttl_ms`` is gone, like the Redis key's expiry.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from tether.persistence.deltas._common import current_step, validate_bounds, validate_deltas
from tether.persistence.deltas.base import START, Cursor, LiveDelta
from tether.persistence.streams._common import tail_wait_ms, validate_session


def _cursor(n: int) -> Cursor:
    return f"0-{n}"


def _number(cursor: Cursor) -> int:
    ms, _, seq = cursor.partition("-")
    if ms != "0" or not seq.isdigit():
        raise ValueError(f"cursor {cursor!r} is not one of this channel's; pass one it gave")
    return int(seq)


@dataclass
class _Channel:
    entries: deque[tuple[int, LiveDelta]]
    expires_s: float


class InMemoryDeltaChannel:
    """The :class:`~tether.persistence.deltas.base.DeltaChannel` in a dict.

    Args:
        max_len: entries kept per session.
        ttl_ms: a channel expires this long after its last append.
        clock: seconds, monotonic (injectable for tests).
    """

    def __init__(
        self,
        *,
        max_len: int = 10_000,
        ttl_ms: int = 30_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        validate_bounds(max_len, ttl_ms)
        self._max_len = max_len
        self._ttl_s = ttl_ms / 1000
        self._clock = clock
        self._channels: dict[tuple[str, str], _Channel] = {}
        # one counter for every channel: a channel that expired and came back never reuses a
        # cursor a follower still holds
        self._next_n = 1
        self._cond = threading.Condition()

    def __repr__(self) -> str:
        return f"InMemoryDeltaChannel(max_len={self._max_len})"

    def _live(self, tenant: str, session_id: str) -> _Channel | None:
        """The session's channel unless it expired (then it is dropped); hold the lock."""
        channel = self._channels.get((tenant, session_id))
        if channel is not None and self._clock() >= channel.expires_s:
            del self._channels[(tenant, session_id)]
            return None
        return channel

    def publish(self, tenant: str, session_id: str, deltas: Sequence[LiveDelta]) -> None:
        validate_session(tenant, session_id)
        validate_deltas(deltas)
        if not deltas:
            return
        with self._cond:
            channel = self._live(tenant, session_id)
            if channel is None:
                channel = _Channel(deque(maxlen=self._max_len), 0.0)
                self._channels[(tenant, session_id)] = channel
            for delta in deltas:
                channel.entries.append((self._next_n, delta))
                self._next_n += 1
            channel.expires_s = self._clock() + self._ttl_s
            self._cond.notify_all()

    def _after(self, tenant: str, session_id: str, after: Cursor) -> list[tuple[Cursor, LiveDelta]]:
        n = _number(after)
        channel = self._live(tenant, session_id)
        if channel is None:
            return []
        return [(_cursor(m), d) for m, d in channel.entries if m > n]

    def read(
        self, tenant: str, session_id: str, *, after: Cursor = START, limit: int | None = None
    ) -> list[tuple[Cursor, LiveDelta]]:
        validate_session(tenant, session_id)
        with self._cond:
            found = self._after(tenant, session_id, after)
        return found if limit is None else found[:limit]

    def current_step(self, tenant: str, session_id: str) -> tuple[list[LiveDelta], Cursor]:
        validate_session(tenant, session_id)
        with self._cond:
            channel = self._live(tenant, session_id)
            entries = list(channel.entries) if channel is not None else []
        group, top = current_step((_cursor(m), d) for m, d in reversed(entries))
        return group, top or START

    def follow(
        self,
        tenant: str,
        session_id: str,
        *,
        after: Cursor = START,
        block_ms: int = 1000,
        idle_timeout_s: float | None = None,
    ) -> Iterator[tuple[Cursor, LiveDelta]]:
        validate_session(tenant, session_id)
        _number(after)
        return self._follow(tenant, session_id, after, block_ms, idle_timeout_s)

    def _follow(
        self,
        tenant: str,
        session_id: str,
        after: Cursor,
        block_ms: int,
        idle_timeout_s: float | None,
    ) -> Iterator[tuple[Cursor, LiveDelta]]:
        idle_since = time.monotonic()
        while True:
            with self._cond:
                found = self._after(tenant, session_id, after)
                if not found:
                    wait_ms = tail_wait_ms(block_ms, idle_timeout_s, idle_since)
                    if wait_ms is None:
                        return
                    self._cond.wait(wait_ms / 1000)
                    continue
            for cursor, delta in found:
                after = cursor
                yield cursor, delta
            idle_since = time.monotonic()

    def length(self, tenant: str, session_id: str) -> int:
        validate_session(tenant, session_id)
        with self._cond:
            channel = self._live(tenant, session_id)
            return 0 if channel is None else len(channel.entries)

    def ttl_ms(self, tenant: str, session_id: str) -> int | None:
        validate_session(tenant, session_id)
        with self._cond:
            channel = self._live(tenant, session_id)
            if channel is None:
                return None
            return max(0, int((channel.expires_s - self._clock()) * 1000))
