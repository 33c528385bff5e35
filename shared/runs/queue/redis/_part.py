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

    def _script(self, lua: LuaScript) -> Script:
        """``lua`` registered on this queue's client (once)."""
        script = self._scripts.get(lua.name)
        if script is None:
            script = self._scripts[lua.name] = self.client.register_script(lua.source)
        return script

    def _leave_active(self, tenant: str, session_id: str) -> None:
        """Drop an idle session from the active index, safely against a concurrent submit.

        The index lives in another slot than the queue, so no script can test and remove at
        once. A submitter pushes to the queue *then* adds the session; removing *then* looking
        at the queue means one of us sees the other: if a run arrived, the session goes back.
        """
        k = self.keys
        member = k.active_member(tenant, session_id)
        active, pending = k.active(tenant, session_id), k.pending(tenant, session_id)
        if self._cluster:  # two nodes: two trips keep the order
            send_shared(self.client, "ZREM", active, member)
            queued = int(self.client.llen(pending))
        else:  # one server runs a pipeline in order

            def fill(pipe: Any) -> None:
                pipe.zrem(active, member)
                pipe.llen(pending)

            queued = int(run_pipeline(self.client, [], fill)[1])
        if queued > 0:
            send_shared(self.client, "ZADD", active, "NX", now_ms(), member)
