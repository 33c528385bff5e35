"""Reading the sharded active-session index (see :meth:`tether.keys.RedisKeys.active`).

The index is :data:`~tether.keys.ACTIVE_SHARDS` sorted sets, one cluster slot each, so no single
key carries every submit and finish; readers ask every shard in one pipelined round trip.
"""

from __future__ import annotations

from typing import Any, cast

import redis

from tether.keys import RedisKeys


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def active_sessions(client: redis.Redis, keys: RedisKeys, limit: int = -1) -> list[tuple[str, str]]:
    """``(tenant, session)`` of every session in the active index (at most ``limit`` per shard
    when given), read from every shard in one pipelined round trip."""
    pipe = client.pipeline(transaction=False)
    for shard in keys.active_shards():
        pipe.zrange(shard, 0, limit - 1 if limit > 0 else -1)
    replies = cast(list[list[bytes]], pipe.execute())
    out = []
    for reply in replies:
        for member in reply:
            tenant, _, session_id = _text(member).partition("/")
            if session_id:
                out.append((tenant, session_id))
    return out


def active_count(client: redis.Redis, keys: RedisKeys) -> int:
    """How many sessions the active index holds (every shard, one round trip)."""
    pipe = client.pipeline(transaction=False)
    for shard in keys.active_shards():
        pipe.zcard(shard)
    return sum(int(n) for n in pipe.execute())
