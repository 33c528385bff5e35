"""Reading the sharded active-session index (see :meth:`tether.keys.RedisKeys.active`).

The index is :data:`~tether.keys.ACTIVE_SHARDS` sorted sets, one cluster slot each, so no single
key carries every submit and finish; readers ask every shard in one pipelined round trip.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

import redis

from tether.ids import is_valid_id
from tether.keys import RedisKeys

log = logging.getLogger(__name__)


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _each_shard(client: redis.Redis, keys: RedisKeys, ask: Callable[[Any, str], Any]) -> list[Any]:
    """The reply of every shard to ``ask(pipe, shard)``, in one pipelined round trip; a shard
    that holds no sorted set is skipped (logged): every tenant's credential may write the
    shared shards (docs/trust-model.md), and one stray value must not stop every reader."""
    shards = keys.active_shards()
    pipe = client.pipeline(transaction=False)
    for shard in shards:
        ask(pipe, shard)
    out = []
    for shard, reply in zip(shards, pipe.execute(raise_on_error=False), strict=True):
        if isinstance(reply, redis.ResponseError) and str(reply).startswith("WRONGTYPE"):
            log.warning("active-index shard %s holds no sorted set; skipped", shard)
            continue
        if isinstance(reply, Exception):
            raise reply
        out.append(reply)
    return out


def active_sessions(client: redis.Redis, keys: RedisKeys, limit: int = -1) -> list[tuple[str, str]]:
    """``(tenant, session)`` of every session in the active index (at most ``limit`` per shard
    when given), read from every shard in one pipelined round trip. Members that name no
    valid tenant and session are left out."""
    stop = limit - 1 if limit > 0 else -1
    replies = cast(list[list[bytes]], _each_shard(client, keys, lambda p, k: p.zrange(k, 0, stop)))
    out = []
    for reply in replies:
        for member in reply:
            tenant, _, session_id = _text(member).partition("/")
            if is_valid_id(tenant) and is_valid_id(session_id):
                out.append((tenant, session_id))
    return out


def active_count(client: redis.Redis, keys: RedisKeys) -> int:
    """How many sessions the active index holds (every shard, one round trip)."""
    return sum(int(n) for n in _each_shard(client, keys, lambda p, k: p.zcard(k)))
