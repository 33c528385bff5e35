"""In-process event stream with the same semantics as the Redis one (tests, embedded use).

Fencing: pass the :class:`~tether.runs.leases.base.LeaseManager` that grants the session's leases
(usually
an :class:`~tether.runs.leases.memory.InMemoryLeaseManager`); appends then compare against its
current
fence, exactly like the Redis append script reads the fence counter. Without one, only the fence
of the last append is enforced.

Retention works as in Redis: ``max_len`` on every append, and ``retention_s`` drops the entries
appended longer ago than that before a batch is added, and empties a log nobody appended to for
that long (the Redis stream's TTL); ``last_seq`` and ``last_fence`` stay either way.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tether.core.events import AgentEvent
from tether.persistence.streams._common import (
    Entry,
    TailCursor,
    fence_not_granted,
    fenced_out,
    plan_append,
    sequence_gap,
    tail_catch_up,
    validate_batch,
    validate_fence,
    validate_max_len,
    validate_read_args,
    validate_retention,
    validate_session,
    validate_tail_args,
    validate_trim_args,
    view_suffix,
)

_MemEntry = Entry[int, AgentEvent]


class FenceSource(Protocol):
    """Whatever grants the session's fencing tokens (a lease manager)."""

    def current_fence(self, tenant: str, session_id: str) -> int:
        """The newest fencing token granted for the session (0 when never leased)."""


@dataclass
class _Log:
    entries: list[_MemEntry] = field(default_factory=list)
    added_s: list[float] = field(default_factory=list)  # the clock at each entry's append
    last_seq: int | None = None  # None: never appended to (no history)
    last_fence: int = 0

    def drop_oldest(self, count: int) -> None:
        del self.entries[:count]
        del self.added_s[:count]

    def drop_appended_before(self, cutoff_s: float) -> None:
        self.drop_oldest(bisect.bisect_left(self.added_s, cutoff_s))


class InMemoryEventStream:
    """Per-session event logs in a dict, guarded by one lock; tails wait on a condition.

    Args:
        leases: the lease manager whose fences the appends must respect (optional).
        max_len: keep about this many newest entries per session (None = unbounded).
        retention_s: drop entries appended longer ago than this many seconds (None = keep).
        clock: the seconds ``retention_s`` is measured in (tests pass one they move).
    """

    def __init__(
        self,
        leases: FenceSource | None = None,
        *,
        max_len: int | None = None,
        retention_s: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        validate_max_len(max_len)
        validate_retention(retention_s)
        self._leases = leases
        self._max_len = max_len
        self._retention_s = retention_s
        self._clock = clock
        self._logs: dict[tuple[str, str], _Log] = {}
        self._next_id = 1  # entry ids increase across all sessions, like a stream's IDs
        self._cond = threading.Condition()

    def append(self, tenant: str, session_id: str, events: Sequence[AgentEvent], fence: int) -> int:
        """Append ``events`` under ``fence``; return the session's last seq afterwards.

        Raises:
            FencedOut: ``fence`` is older than the session's current fence; nothing written.
            ConflictError: the batch would leave a gap; nothing written.
            InvalidInput: the batch is malformed (see :func:`validate_batch`).
        """
        validate_batch(tenant, session_id, events)
        validate_fence(fence)
        current = 0 if self._leases is None else self._leases.current_fence(tenant, session_id)
        with self._cond:
            log = self._logs.setdefault((tenant, session_id), _Log())
            newest = max(current, log.last_fence)
            if fence < newest:
                raise fenced_out(tenant, session_id, fence, newest)
            if current > 0 and fence > current:
                raise fence_not_granted(tenant, session_id, fence, current)
            if not events:
                return log.last_seq or 0
            skip = plan_append(events[0].seq, len(events), fence, log.last_seq, log.last_fence)
            if skip is None:
                raise sequence_gap(tenant, session_id, events[0].seq, log.last_seq or 0)
            todo = events[skip:]
            if not todo:
                return log.last_seq or 0
            now_s = self._clock()
            if self._retention_s is not None:
                log.drop_appended_before(now_s - self._retention_s)
            for ev in todo:
                log.entries.append(Entry(self._next_id, ev.seq, fence, ev))
                log.added_s.append(now_s)
                self._next_id += 1
            log.last_seq = todo[-1].seq
            log.last_fence = fence
            if self._max_len is not None and len(log.entries) > self._max_len:
                log.drop_oldest(len(log.entries) - self._max_len)
            self._cond.notify_all()
            return log.last_seq

    def read(
        self, tenant: str, session_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[AgentEvent]:
        """Visible events with ``seq > after_seq``, ascending, at most ``limit``."""
        validate_session(tenant, session_id)
        validate_read_args(after_seq, limit)
        with self._cond:
            log = self._live((tenant, session_id))
            entries = [] if log is None else list(reversed(log.entries))
        kept, _top = view_suffix(entries, after_seq)
        events = [e.data for e in kept]
        return events if limit is None else events[:limit]

    def tail(
        self,
        tenant: str,
        session_id: str,
        *,
        after_seq: int = 0,
        block_ms: int = 1000,
        idle_timeout_s: float | None = None,
    ) -> Iterator[AgentEvent]:
        """Yield events after ``after_seq`` as they arrive (see :class:`TailCursor`).

        Stops once nothing arrived for ``idle_timeout_s`` (None: never). ``block_ms`` is the
        longest single wait, as in the Redis implementation.
        """
        validate_session(tenant, session_id)
        validate_tail_args(after_seq, block_ms, idle_timeout_s)
        return self._tail(tenant, session_id, after_seq, block_ms, idle_timeout_s)

    def _tail(
        self,
        tenant: str,
        session_id: str,
        after_seq: int,
        block_ms: int,
        idle_timeout_s: float | None,
    ) -> Iterator[AgentEvent]:
        key = (tenant, session_id)
        with self._cond:
            log = self._live(key)
            snapshot = [] if log is None else list(reversed(log.entries))
        kept, top, start_seq = tail_catch_up(snapshot, after_seq)
        cursor = TailCursor(start_seq, top)
        last_id = 0 if top is None else top.entry_id
        for entry in kept:
            if cursor.accept(entry):
                yield entry.data
        idle_since = time.monotonic()
        while True:
            with self._cond:
                new = self._entries_after(key, last_id)
                while not new:
                    wait_s = block_ms / 1000
                    if idle_timeout_s is not None:
                        remaining_s = idle_timeout_s - (time.monotonic() - idle_since)
                        if remaining_s <= 0:
                            return
                        wait_s = min(wait_s, remaining_s)
                    self._cond.wait(wait_s)
                    new = self._entries_after(key, last_id)
            for entry in new:
                last_id = entry.entry_id
                if cursor.accept(entry):
                    yield entry.data
            idle_since = time.monotonic()

    def _live(self, key: tuple[str, str]) -> _Log | None:
        """The session's log, emptied first when nobody appended to it for the retention (what
        the Redis stream's TTL does). Call with the lock held."""
        log = self._logs.get(key)
        if (
            log is not None
            and self._retention_s is not None
            and log.added_s
            and log.added_s[-1] < self._clock() - self._retention_s
        ):
            log.drop_oldest(len(log.entries))
        return log

    def _entries_after(self, key: tuple[str, str], last_id: int) -> list[_MemEntry]:
        log = self._logs.get(key)
        if log is None:
            return []
        start = bisect.bisect_right(log.entries, last_id, key=lambda e: e.entry_id)
        return log.entries[start:]

    def trim(
        self,
        tenant: str,
        session_id: str,
        *,
        max_len: int | None = None,
        min_seq: int | None = None,
    ) -> int:
        """Drop the oldest entries: keep at most ``max_len`` and those from the first visible
        event with ``seq >= min_seq`` on; return how many entries were dropped."""
        validate_session(tenant, session_id)
        validate_trim_args(max_len, min_seq)
        with self._cond:
            log = self._live((tenant, session_id))
            if log is None or not log.entries:
                return 0
            cut = 0
            if max_len is not None:
                cut = max(cut, len(log.entries) - max_len)
            if min_seq is not None:
                kept, _top = view_suffix(reversed(log.entries), min_seq - 1)
                if kept:
                    first_id = kept[0].entry_id
                    pos = bisect.bisect_left(log.entries, first_id, key=lambda e: e.entry_id)
                    cut = max(cut, pos)
                else:
                    cut = len(log.entries)
            log.drop_oldest(cut)
            return cut
