"""Lease manager on Redis: a ``SET PX`` key per session plus the session's fence counter.

The lease key holds ``"<owner>|<fence>"``; renew and release compare that value exactly, so only
the grant that set it can touch it (an owner that lost the lease and got it again has a new fence,
so its old :class:`~tether.runs.leases.base.Lease` is stale). Each grant INCRs the fence counter
that the
stream's append script reads (see :mod:`tether.keys`), all in one Lua script per operation.
"""

from __future__ import annotations

from typing import Any, cast

import redis

from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.runs.leases._common import validate_acquire, validate_ttl
from tether.runs.leases.base import Lease

#: KEYS: lease, fence counter. ARGV: owner, ttl_ms. Returns the new fence, or 0 when held.
ACQUIRE_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. fence, 'PX', ARGV[2])
return fence
"""

#: KEYS: lease. ARGV: expected value, ttl_ms. Returns 1 when extended.
RENEW_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

#: KEYS: lease. ARGV: expected value. Returns 1 when deleted.
RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def _value(lease: Lease) -> str:
    return f"{lease.owner}|{lease.fence}"


class RedisLeaseManager:
    """The :class:`~tether.runs.leases.base.LeaseManager` on Redis.

    Acquiring a held lease fails even for the same owner: use :meth:`renew`.

    Args:
        client: a bytes client, e.g. from :func:`tether.persistence.redis_conn.redis_from_url`.
        keys: the key schema (namespace); default prefix ``tether``.
    """

    def __init__(self, client: redis.Redis, *, keys: RedisKeys | None = None) -> None:
        self._client = client
        self._keys = keys or RedisKeys()
        self._where = describe_client(client)
        self._acquire = client.register_script(ACQUIRE_SCRIPT)
        self._renew = client.register_script(RENEW_SCRIPT)
        self._release = client.register_script(RELEASE_SCRIPT)

    def __repr__(self) -> str:
        return f"RedisLeaseManager({self._where}, {self._keys!r})"

    def acquire(self, tenant: str, session_id: str, owner: str, ttl_ms: int) -> Lease | None:
        """Grant the lease to ``owner`` with a new fence if it is free; None when held.

        Raises:
            StreamUnavailable: Redis cannot be reached.
        """
        validate_acquire(tenant, session_id, owner, ttl_ms)
        lease_key = self._keys.lease(tenant, session_id)
        fence_key = self._keys.fence(tenant, session_id)
        with translate_errors(self._where):
            fence = int(cast(Any, self._acquire(keys=[lease_key, fence_key], args=[owner, ttl_ms])))
        return Lease(tenant, session_id, owner, fence) if fence else None

    def renew(self, lease: Lease, ttl_ms: int) -> bool:
        """Extend the lease to ``ttl_ms`` from now; False when this grant no longer holds it."""
        validate_ttl(ttl_ms)
        key = self._keys.lease(lease.tenant, lease.session_id)
        with translate_errors(self._where):
            return bool(self._renew(keys=[key], args=[_value(lease), ttl_ms]))

    def release(self, lease: Lease) -> bool:
        """Free the lease if this grant holds it; True when released."""
        key = self._keys.lease(lease.tenant, lease.session_id)
        with translate_errors(self._where):
            return bool(self._release(keys=[key], args=[_value(lease)]))

    def current_fence(self, tenant: str, session_id: str) -> int:
        """The newest fence granted for the session (0 when never leased)."""
        key = self._keys.fence(tenant, session_id)
        with translate_errors(self._where):
            raw = self._client.get(key)
        return int(raw) if raw is not None else 0

    def holder(self, tenant: str, session_id: str) -> str | None:
        """The current owner, or None when free."""
        key = self._keys.lease(tenant, session_id)
        with translate_errors(self._where):
            raw = self._client.get(key)
        if raw is None:
            return None
        text = raw.decode() if isinstance(raw, bytes) else raw
        return text.rpartition("|")[0]
