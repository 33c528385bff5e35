"""The head cache on Redis: one string per session, in the session's hash slot."""

from __future__ import annotations

import logging
from typing import Any

import redis

from tether.keys import RedisKeys
from tether.persistence.headcache.base import CachedHead, entry_for, entry_limit, unpack
from tether.persistence.lua import load
from tether.persistence.redis_conn import describe_client, translate_errors

PUT = load("head_put")
GET = load("head_get")

log = logging.getLogger(__name__)


class RedisHeadCache:
    """The :class:`~tether.persistence.headcache.base.HeadCache` on Redis.

    The entry lives beside the session's lease and fence counter (``<ns>:{<t>/<s>}:head``, one
    slot), expires ``ttl_ms`` after its last ``put``, and is checked against the fence counter
    the lease manager increments on every grant.

    Args:
        client: a bytes client.
        keys: the key schema (namespace).
        ttl_ms: how long an entry lives after its ``put``.
        max_bytes: larger heads are not cached (Redis memory is ``max_bytes`` x sessions run
            within ``ttl_ms`` at most).
    """

    def __init__(
        self, client: redis.Redis, keys: RedisKeys, *, ttl_ms: int, max_bytes: int
    ) -> None:
        self._client = client
        self._keys = keys
        self._ttl_ms = ttl_ms
        self._max_bytes = max_bytes
        self._where = describe_client(client)
        self._put = client.register_script(PUT.source)
        self._get = client.register_script(GET.source)

    def get(self, tenant: str, session_id: str) -> CachedHead | None:
        """The cached head; an entry no ``put`` could have written (the session's tenant may
        write the key) is dropped, unread when too long or of another type, and misses."""
        key = self._keys.head_cache(tenant, session_id)
        argv = GET.argv(max_len=entry_limit(self._max_bytes))
        with translate_errors(self._where):
            entry: Any = self._get(keys=GET.keys(head_cache=key), args=argv)
        if not isinstance(entry, bytes):
            if entry == 1:
                _dropped(tenant, session_id, "longer than any head packs into, or not a string")
            return None
        hit = unpack(entry, self._max_bytes)
        if hit is None:
            self.drop(tenant, session_id)
            why = f"unknown format, damaged, or inflating past {self._max_bytes} bytes"
            _dropped(tenant, session_id, why)
        return hit

    def put(
        self, tenant: str, session_id: str, data: bytes, version: str, writer_fence: int
    ) -> bool:
        k = self._keys
        entry = entry_for(data, version, writer_fence, self._max_bytes)
        keys = PUT.keys(
            fence=k.fence(tenant, session_id), head_cache=k.head_cache(tenant, session_id)
        )
        argv = PUT.argv(writer_fence=writer_fence, entry=entry or b"", ttl_ms=self._ttl_ms)
        with translate_errors(self._where):
            done = self._put(keys=keys, args=argv)
        return bool(int(done))

    def drop(self, tenant: str, session_id: str) -> None:
        with translate_errors(self._where):
            self._client.delete(self._keys.head_cache(tenant, session_id))


def _dropped(tenant: str, session_id: str, why: str) -> None:
    """Warn once per entry (it is gone after): a run reads the store instead."""
    log.warning(
        "cached head of %s/%s dropped, reading the store (%s); if this recurs, check what "
        "else writes the session's keys (its tenant's Redis credential can)",
        tenant,
        session_id,
        why,
    )
