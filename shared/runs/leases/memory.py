"""In-process lease manager: a dict of grants with monotonic-clock expiry (tests, embedded use)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tether.ids import validate_id, validate_tenant
from tether.runs.leases._common import validate_acquire, validate_ttl
from tether.runs.leases.base import Lease


@dataclass
class _Grant:
    owner: str
    fence: int
    expires_at_s: float


class InMemoryLeaseManager:
    """The :class:`~tether.runs.leases.base.LeaseManager` in memory.

    A lease is held by one grant (owner and fence); it is free once released or once its TTL
    passed on ``clock``. Acquiring a held lease fails even for the same owner: use :meth:`renew`.

    Args:
        clock: seconds on a monotonic clock (injectable for tests).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._grants: dict[tuple[str, str], _Grant] = {}
        self._fences: dict[tuple[str, str], int] = {}
        self._released: dict[tuple[str, str], int] = {}

    def _live(self, key: tuple[str, str]) -> _Grant | None:
        grant = self._grants.get(key)
        if grant is not None and grant.expires_at_s <= self._clock():
            del self._grants[key]
            return None
        return grant

    def acquire(self, tenant: str, session_id: str, owner: str, ttl_ms: int) -> Lease | None:
        """Grant the lease to ``owner`` with a new fence if it is free; None when held."""
        validate_acquire(tenant, session_id, owner, ttl_ms)
        key = (tenant, session_id)
        with self._lock:
            if self._live(key) is not None:
                return None
            last = self._fences.get(key, 0)
            takeover = last > 0 and self._released.get(key) != last
            fence = last + 1
            self._fences[key] = fence
            self._grants[key] = _Grant(owner, fence, self._clock() + ttl_ms / 1000)
            return Lease(tenant, session_id, owner, fence, takeover=takeover)

    def _is_held_by(self, lease: Lease) -> bool:
        validate_tenant(lease.tenant)
        validate_id(lease.session_id)
        grant = self._live((lease.tenant, lease.session_id))
        return grant is not None and (grant.owner, grant.fence) == (lease.owner, lease.fence)

    def renew(self, lease: Lease, ttl_ms: int) -> bool:
        """Extend the lease to ``ttl_ms`` from now; False when this grant no longer holds it."""
        validate_ttl(ttl_ms)
        with self._lock:
            if not self._is_held_by(lease):
                return False
            grant = self._grants[(lease.tenant, lease.session_id)]
            grant.expires_at_s = self._clock() + ttl_ms / 1000
            return True

    def release(self, lease: Lease) -> bool:
        """Free the lease if this grant holds it; True when released."""
        with self._lock:
            if not self._is_held_by(lease):
                return False
            del self._grants[(lease.tenant, lease.session_id)]
            self._released[(lease.tenant, lease.session_id)] = lease.fence
            return True

    def current_fence(self, tenant: str, session_id: str) -> int:
        """The newest fence granted for the session (0 when never leased)."""
        validate_tenant(tenant)
        validate_id(session_id)
        with self._lock:
            return self._fences.get((tenant, session_id), 0)

    def holder(self, tenant: str, session_id: str) -> str | None:
        """The current owner, or None when free."""
        validate_tenant(tenant)
        validate_id(session_id)
        with self._lock:
            grant = self._live((tenant, session_id))
            return None if grant is None else grant.owner

    def abandoned(self, tenant: str, session_id: str) -> bool:
        """True when the last grant expired unreleased (see the Protocol)."""
        validate_tenant(tenant)
        validate_id(session_id)
        key = (tenant, session_id)
        with self._lock:
            last = self._fences.get(key, 0)
            return self._live(key) is None and last > 0 and self._released.get(key) != last
