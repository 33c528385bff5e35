"""Lease manager on Redis: a ``SET PX`` key per session plus the session's fence counter.

The lease key holds ``"<owner>|<fence>"``; renew and release compare that value exactly, so only
the grant that set it can touch it (an owner that lost the lease and got it again has a new fence,
so its old :class:`~tether.runs.leases.base.Lease` is stale). Each grant INCRs the fence counter
that the stream's
append script reads (see :mod:`tether.keys`), all in one Lua script per operation
(``lease_*.lua`` in :mod:`tether.persistence.lua`).
"""

from __future__ import annotations

from typing import Any, cast

import redis

from tether.keys import RedisKeys
from tether.persistence.lua import load
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.runs.leases._common import validate_acquire, validate_ttl
from tether.runs.leases.base import Lease

ACQUIRE = load("lease_acquire")
RENEW = load("lease_renew")
RELEASE = load("lease_release")


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
        self._acquire = client.register_script(ACQUIRE.source)
        self._renew = client.register_script(RENEW.source)
        self._release = client.register_script(RELEASE.source)

    def __repr__(self) -> str:
        return f"RedisLeaseManager({self._where}, {self._keys!r})"

    def acquire(self, tenant: str, session_id: str, owner: str, ttl_ms: int) -> Lease | None:
        """Grant the lease to ``owner`` with a new fence if it is free; None when held.

        Raises:
            StreamUnavailable: Redis cannot be reached.
        """
        validate_acquire(tenant, session_id, owner, ttl_ms)
        k = self._keys
        keys = ACQUIRE.keys(
            lease=k.lease(tenant, session_id),
            fence=k.fence(tenant, session_id),
            released=k.released(tenant, session_id),
        )
        argv = ACQUIRE.argv(owner=owner, ttl_ms=ttl_ms)
        with translate_errors(self._where):
            grant = ACQUIRE.reply(cast(Any, self._acquire(keys=keys, args=argv)))
        if not int(grant["fence"]):
            return None
        fence, takeover = int(grant["fence"]), bool(int(grant["takeover"]))
        return Lease(tenant, session_id, owner, fence, takeover=takeover)

    def renew(self, lease: Lease, ttl_ms: int) -> bool:
        """Extend the lease to ``ttl_ms`` from now; False when this grant no longer holds it."""
        validate_ttl(ttl_ms)
        keys = RENEW.keys(lease=self._keys.lease(lease.tenant, lease.session_id))
        argv = RENEW.argv(lease_value=_value(lease), ttl_ms=ttl_ms)
        with translate_errors(self._where):
            return bool(self._renew(keys=keys, args=argv))

    def release(self, lease: Lease) -> bool:
        """Free the lease if this grant holds it; True when released."""
        t, s = lease.tenant, lease.session_id
        keys = RELEASE.keys(lease=self._keys.lease(t, s), released=self._keys.released(t, s))
        argv = RELEASE.argv(lease_value=_value(lease), fence=lease.fence)
        with translate_errors(self._where):
            return bool(self._release(keys=keys, args=argv))

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

    def abandoned(self, tenant: str, session_id: str) -> bool:
        """True when the last grant expired unreleased (see the Protocol)."""
        k = self._keys
        with translate_errors(self._where):
            pipe = self._client.pipeline(transaction=False)
            pipe.exists(k.lease(tenant, session_id))
            pipe.get(k.fence(tenant, session_id))
            pipe.get(k.released(tenant, session_id))
            held, last, released = pipe.execute()
        return not held and last is not None and last != released
