"""What the recovery sweeper reads and claims on Redis (the
:class:`~tether.runs.queue.base.Recovery` role): the sharded active-session index, which only
workers write, and the tenants' own queued indexes, which each tenant's producer writes.

The sweeper still reads both as untrusted (a deployment may keep granting tenants the old write
access to the active index, docs/upgrading.md; and a tenant writes its own queued index as it
likes): a member that names no session of its shard is removed, and a shard another command
turned into another type is skipped, each with a warning, and the sweep goes on with the rest.
Nothing a tenant writes stops recovery for the others.

Which tenants' queued indexes to read: the tenants index workers note when they claim (every
:data:`~tether.worker.engine.claim_redis.TENANT_NOTE_S`), and, every :data:`TENANT_SCAN_S`, a
SCAN for queued indexes of tenants no worker claimed for yet (a tenant whose first run's message
was lost).
"""

from __future__ import annotations

import logging
import time
from typing import cast

import redis

from tether.core.events import now_ms
from tether.errors import InvalidId
from tether.ids import is_valid_id
from tether.keys import QUEUED_SHARDS, RedisKeys
from tether.persistence.active_index import known_tenants, note_tenant
from tether.persistence.redis_conn import translate_errors
from tether.runs.queue.base import IdleSession
from tether.runs.queue.redis._common import text
from tether.runs.queue.redis._part import RedisQueuePart

log = logging.getLogger(__name__)

#: A shard's reply: its stale members with their scores (or the error it got instead).
_Reply = list[tuple[bytes, float]] | redis.exceptions.ResponseError
#: How often one process looks for tenants' queued indexes with SCAN (s).
TENANT_SCAN_S = 600.0


class RedisRecovery(RedisQueuePart):
    """Find sessions without progress, and claim the right to wake them."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, *, result_ttl_s: int) -> None:
        super().__init__(client, keys, result_ttl_s=result_ttl_s)
        #: Shards found holding another type: warned about once, until they read again.
        self._unusable_shards: set[str] = set()
        self._scanned_at_s = -TENANT_SCAN_S

    def pending_count(self, tenant: str, session_id: str) -> int:
        """How many runs are queued for the session."""
        with translate_errors(self._where):
            return int(self.client.llen(self.keys.pending(tenant, session_id)))

    def idle_sessions(self, idle_ms: int, limit: int = 100) -> list[IdleSession]:
        """Active sessions without progress for ``idle_ms`` (oldest first) with how long each
        has been idle, over every shard of the index in one pipelined round trip. A member
        naming no session of its shard is removed and a shard of another type skipped (see the
        module's notes)."""
        now = now_ms()
        cutoff = now - idle_ms
        shards = self.keys.active_shards()
        with translate_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            for shard in shards:
                pipe.zrangebyscore(shard, "-inf", cutoff, start=0, num=limit, withscores=True)
            replies = cast(list[_Reply], pipe.execute(raise_on_error=False))
        found: list[tuple[float, bytes, tuple[str, str]]] = []
        invalid: list[tuple[str, bytes]] = []
        for shard, reply in zip(shards, replies, strict=True):
            if not self._readable(shard, reply):
                continue
            for member, score in cast(list[tuple[bytes, float]], reply):
                session = self._session_in(shard, member)
                if session is None:
                    invalid.append((shard, member))
                else:
                    found.append((score, member, session))
        if invalid:
            self._remove_members(invalid)
        return [
            IdleSession(*session, int(now - score)) for score, _, session in sorted(found)[:limit]
        ]

    def unclaimed_sessions(self, idle_ms: int, limit: int = 100) -> list[tuple[str, str]]:
        """Sessions of every known tenant's queued index marked ``idle_ms`` ago or more (oldest
        first), every shard of every tenant in one pipelined round trip."""
        cutoff = now_ms() - idle_ms
        tenants = self._known_tenants()
        shards = [
            (tenant, self.keys.tenant_queued_shard(tenant, n))
            for tenant in tenants
            for n in range(QUEUED_SHARDS)
        ]
        with translate_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            for _, shard in shards:
                pipe.zrangebyscore(shard, "-inf", cutoff, start=0, num=limit, withscores=True)
            replies = cast(list[_Reply], pipe.execute(raise_on_error=False))
        found: list[tuple[float, str, str]] = []
        invalid: list[tuple[str, bytes]] = []
        for (tenant, shard), reply in zip(shards, replies, strict=True):
            if not self._readable(shard, reply):
                continue
            for member, score in cast(list[tuple[bytes, float]], reply):
                session = self._queued_session(tenant, shard, member)
                if session is None:
                    invalid.append((shard, member))
                else:
                    found.append((score, tenant, session))
        if invalid:
            self._remove_members(invalid)
        return [(tenant, session) for _, tenant, session in sorted(found)[:limit]]

    def _queued_session(self, tenant: str, shard: str, member: bytes) -> str | None:
        """The session ``member`` of ``tenant``'s queued ``shard`` names, or None when it names
        no valid session of that shard."""
        try:
            session_id = member.decode()
            if self.keys.tenant_queued(tenant, session_id) == shard:  # validates the id
                return session_id
        except (UnicodeDecodeError, InvalidId):
            pass
        return None

    def _known_tenants(self) -> list[str]:
        """The tenants index, with the tenants a SCAN for queued indexes found (every
        :data:`TENANT_SCAN_S` per process), which are noted in the index for other readers."""
        with translate_errors(self._where):
            noted = set(known_tenants(self.client, self.keys))
            if time.monotonic() - self._scanned_at_s >= TENANT_SCAN_S:
                pattern = f"{self.keys.prefix}:{{*/~queued:*}}"
                for key in self.client.scan_iter(match=pattern, count=1000):
                    tenant = text(key).split("{", 1)[1].split("/", 1)[0]
                    if is_valid_id(tenant) and tenant not in noted:
                        note_tenant(self.client, self.keys, tenant)
                        noted.add(tenant)
                self._scanned_at_s = time.monotonic()
        return sorted(noted)

    def _readable(self, shard: str, reply: _Reply) -> bool:
        """False when ``shard`` holds another type than a zset (warned once); any other error
        is raised as the run queue's errors are."""
        if not isinstance(reply, Exception):
            self._unusable_shards.discard(shard)
            return True
        if not str(reply).startswith("WRONGTYPE"):
            with translate_errors(self._where):
                raise reply
        if shard not in self._unusable_shards:
            self._unusable_shards.add(shard)
            log.warning(
                "session index shard %s is not a sorted set (%s), so the sweeper skips the "
                "sessions it should list; something other than Tether wrote it: delete the "
                "key, and claims and submits rebuild it",
                shard,
                reply,
            )
        return False

    def _session_in(self, shard: str, member: bytes) -> tuple[str, str] | None:
        """``(tenant, session_id)`` of ``member``, or None when it names no valid session
        whose member belongs in ``shard``."""
        try:
            tenant, sep, session_id = member.decode().partition("/")
            if sep and self.keys.active(tenant, session_id) == shard:  # validates both ids
                return tenant, session_id
        except (UnicodeDecodeError, InvalidId):
            pass
        return None

    def _remove_members(self, invalid: list[tuple[str, bytes]]) -> None:
        """Remove members that name no session of their shard (warned once: they are gone)."""
        with translate_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            for shard, member in invalid:
                pipe.zrem(shard, member)
            pipe.execute()
        for shard, member in invalid:
            log.warning(
                "removed %r from the session index shard %s: it names no session of that "
                "shard (something other than Tether wrote it)",
                member,
                shard,
            )

    def claim_kick(self, tenant: str, session_id: str, ttl_ms: int) -> bool:
        """Claim re-enqueueing the session for ``ttl_ms`` and record progress on it."""
        k = self.keys
        with translate_errors(self._where):
            if not self.client.set(k.kick(tenant, session_id), b"1", nx=True, px=ttl_ms):
                return False
            self.client.zadd(
                k.active(tenant, session_id),
                {k.active_member(tenant, session_id): now_ms()},
                xx=True,
            )
        return True

    def forget_if_idle(self, tenant: str, session_id: str) -> None:
        """Drop a session from the active set when it has no queue and no lease."""
        k = self.keys
        with translate_errors(self._where):
            if not self.client.exists(k.lease(tenant, session_id)) and not self.client.llen(
                k.pending(tenant, session_id)
            ):
                self._leave_active(tenant, session_id)
