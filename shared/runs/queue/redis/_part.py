"""The base of the run queue's role classes on Redis: the client, the key schema, the record
TTL and the scripts, registered once per queue."""

from __future__ import annotations

from typing import Any, cast

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script

from tether.core.events import now_ms
from tether.keys import RedisKeys
from tether.persistence.lua import LuaScript
from tether.persistence.redis_conn import describe_client
from tether.persistence.scripts import run_pipeline, send_shared
from tether.runs.usage.redis import RedisTenantUsage


class RedisQueuePart:
    """State every role of :class:`~tether.runs.queue.redis.RedisRunQueue` shares.

    Args:
        client: a bytes Redis client (:func:`tether.persistence.redis_conn.redis_from_url`).
        keys: the key schema (namespace).
        result_ttl_s: how long run records and request-id indexes live.
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys, *, result_ttl_s: int) -> None:
        self.client = client
        self.keys = keys
        self.result_ttl_s = result_ttl_s
        self._where = describe_client(client)
        self._scripts: dict[str, Script] = {}
        self._cluster = isinstance(cast(Any, client), RedisCluster)
        self.tenant_usage = RedisTenantUsage(client, keys)
        #: Tenants this queue noted in the tenants index (see ``submit_many``).
        self._noted_tenants: set[str] = set()

    def _script(self, lua: LuaScript) -> Script:
        """``lua`` registered on this queue's client (once)."""
        script = self._scripts.get(lua.name)
        if script is None:
            script = self._scripts[lua.name] = self.client.register_script(lua.source)
        return script

    def _leave_active(self, tenant: str, session_id: str) -> None:
        """Drop an idle session from the active index and its tenant's queued index, safely
        against a concurrent submit.

        The indexes live in other slots than the queue, so no script can test and remove at
        once. A submitter pushes to the queue *then* marks the session; removing *then* looking
        at the queue means one of us sees the other: if a run arrived, the session goes back
        into the active index (a worker's, which the sweeper reads every pass).
        """
        k = self.keys
        member = k.active_member(tenant, session_id)
        active, pending = k.active(tenant, session_id), k.pending(tenant, session_id)
        queued_index = k.tenant_queued(tenant, session_id)
        if self._cluster:  # several nodes: separate trips keep the order

            def drop(pipe: Any) -> None:
                pipe.zrem(active, member)
                pipe.zrem(queued_index, session_id)

            run_pipeline(self.client, [], drop)
            queued = int(self.client.llen(pending))
        else:  # one server runs a pipeline in order

            def fill(pipe: Any) -> None:
                pipe.zrem(active, member)
                pipe.zrem(queued_index, session_id)
                pipe.llen(pending)

            queued = int(run_pipeline(self.client, [], fill)[2])
        if queued > 0:
            send_shared(self.client, "ZADD", active, "NX", now_ms(), member)

    def _mark_active(self, pipe: Any, tenant: str, session_id: str) -> None:
        """Queue on ``pipe`` the session's entry in the active index, unless it has one: a
        worker claimed or began a run there (a tenant's producer marks only its own queued
        index, :meth:`~tether.keys.RedisKeys.tenant_queued`)."""
        k = self.keys
        pipe.zadd(
            k.active(tenant, session_id), {k.active_member(tenant, session_id): now_ms()}, nx=True
        )
