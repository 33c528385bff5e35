"""The wait index in memory (tests, in-process cycles): the same behaviour as
:class:`~tether.runs.waits.redis.RedisWaitIndex`, one lock."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from tether.runs.waits.base import REDELIVER_MS, TimerMember, WaitRecord


class InMemoryWaitIndex:
    """:class:`~tether.runs.waits.base.WaitIndex` in a dict and a score table."""

    def __init__(self, *, redeliver_ms: int = REDELIVER_MS) -> None:
        self._lock = threading.Lock()
        self._records: dict[TimerMember, WaitRecord] = {}
        self._scores: dict[TimerMember, int] = {}
        self._redeliver_ms = redeliver_ms
        self._sentinel = False
        self._reconciler: tuple[str, float] | None = None

    def park(self, records: Sequence[WaitRecord]) -> None:
        with self._lock:
            for r in records:
                self._records[r.member] = r
                wake_at_ms = r.wait_for.wake_at_ms
                if wake_at_ms is not None:
                    self._scores.setdefault(r.member, wake_at_ms)

    def settle(self, tenant: str, session_id: str, call_ids: Sequence[str]) -> None:
        with self._lock:
            for call_id in call_ids:
                member = TimerMember(tenant, session_id, call_id)
                self._records.pop(member, None)
                self._scores.pop(member, None)

    def records(self, tenant: str, session_id: str) -> list[WaitRecord]:
        with self._lock:
            return [
                r
                for m, r in self._records.items()
                if (m.tenant, m.session_id) == (tenant, session_id)
            ]

    def take_due(self, now_ms: int, *, limit: int = 100) -> list[TimerMember]:
        with self._lock:
            due = sorted((s, m) for m, s in self._scores.items() if s <= now_ms)[:limit]
            for _, member in due:
                self._scores[member] = now_ms + self._redeliver_ms
            return [m for _, m in due]

    def done(self, members: Sequence[TimerMember]) -> None:
        with self._lock:
            for m in members:
                self._scores.pop(m, None)

    def get_many(self, members: Sequence[TimerMember]) -> list[WaitRecord | None]:
        with self._lock:
            return [self._records.get(m) for m in members]

    def recorded(self, sessions: Sequence[tuple[str, str]]) -> list[bool]:
        with self._lock:
            have = {(m.tenant, m.session_id) for m in self._records}
            return [s in have for s in sessions]

    def next_due_ms(self) -> int | None:
        with self._lock:
            return min(self._scores.values(), default=None)

    def lost(self) -> bool:
        with self._lock:
            lost, self._sentinel = not self._sentinel, True
            return lost

    def take_reconcile(self, owner: str, ttl_ms: int) -> bool:
        now_s = time.monotonic()
        with self._lock:
            if self._reconciler is not None and self._reconciler[1] > now_s:
                return False
            self._reconciler = (owner, now_s + ttl_ms / 1000)
            return True

    def counts(self) -> dict[str, int]:
        """How many calls wait in the timers index."""
        with self._lock:
            return {"timers": len(self._scores)}

    def clear(self) -> None:
        """Forget everything (what a Redis flush does)."""
        with self._lock:
            self._records.clear()
            self._scores.clear()
            self._sentinel = False
            self._reconciler = None
