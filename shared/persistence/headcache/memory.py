"""The head cache in memory (tests and embedded use): entries with a monotonic-clock expiry."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tether.ids import validate_id, validate_tenant
from tether.persistence.headcache.base import CachedHead, entry_for, unpack


class InMemoryHeadCache:
    """The :class:`~tether.persistence.headcache.base.HeadCache` in memory.

    Args:
        fence_of: the session's newest lease fence (e.g. the in-memory lease manager's
            :meth:`~tether.runs.leases.memory.InMemoryLeaseManager.current_fence`).
        ttl_ms: how long an entry lives after its ``put``.
        max_bytes: larger heads are not cached.
        clock: seconds on a monotonic clock (injectable for tests).
    """

    def __init__(
        self,
        fence_of: Callable[[str, str], int],
        *,
        ttl_ms: int,
        max_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fence_of = fence_of
        self._ttl_s = ttl_ms / 1000
        self._max_bytes = max_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], tuple[bytes, float]] = {}

    def get(self, tenant: str, session_id: str) -> CachedHead | None:
        key = (validate_tenant(tenant), validate_id(session_id))
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            entry, expires_at_s = found
            if expires_at_s <= self._clock():
                del self._entries[key]
                return None
            hit = unpack(entry, self._max_bytes)
            if hit is None:  # as on Redis: an entry the limit refuses misses, and goes
                del self._entries[key]
        return hit

    def put(
        self, tenant: str, session_id: str, data: bytes, version: str, writer_fence: int
    ) -> bool:
        key = (validate_tenant(tenant), validate_id(session_id))
        entry = entry_for(data, version, writer_fence, self._max_bytes)
        with self._lock:
            if entry is None or self._fence_of(*key) != writer_fence:
                self._entries.pop(key, None)
                return False
            self._entries[key] = (entry, self._clock() + self._ttl_s)
            return True

    def drop(self, tenant: str, session_id: str) -> None:
        key = (validate_tenant(tenant), validate_id(session_id))
        with self._lock:
            self._entries.pop(key, None)
