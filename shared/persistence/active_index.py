"""Reading the indexes of sessions with work: the namespace's sharded active-session index
(:meth:`tether.keys.RedisKeys.active`, which workers keep from a session's first claim until its
queue is empty) and each tenant's queued index (:meth:`~tether.keys.RedisKeys.tenant_queued`,
where its producer marks a session it queued a run on, before any worker claimed it).

Each index is sharded, one cluster slot a shard, so no single key carries every submit and
finish; readers ask every shard in one pipelined round trip. Whose queued indexes to read is the
tenants index (:meth:`~tether.keys.RedisKeys.tenants`), which workers, operators and producers
holding the namespace's credential write; a tenant's own credential cannot (docs/trust-model.md).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

import redis

from tether.core.events import now_ms
from tether.ids import is_valid_id
from tether.keys import QUEUED_SHARDS, RedisKeys

log = logging.getLogger(__name__)


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _each_shard(
    client: redis.Redis, shards: Sequence[str], ask: Callable[[Any, str], Any]
) -> list[list[bytes]]:
    """The reply of every shard to ``ask(pipe, shard)`` (a ZRANGE), in one pipelined round
    trip; a shard that holds no sorted set reads as empty (logged): one stray value must not
    stop every reader."""
    if not shards:
        return []
    pipe = client.pipeline(transaction=False)
    for shard in shards:
        ask(pipe, shard)
    out: list[list[bytes]] = []
    for shard, reply in zip(shards, pipe.execute(raise_on_error=False), strict=True):
        if isinstance(reply, redis.ResponseError) and str(reply).startswith("WRONGTYPE"):
            log.warning("session index shard %s holds no sorted set; skipped", shard)
            out.append([])
            continue
        if isinstance(reply, Exception):
            raise reply
        out.append(reply)
    return out


def known_tenants(client: redis.Redis, keys: RedisKeys) -> list[str]:
    """The tenants of the tenants index (valid ids only)."""
    return sorted(t for t in map(_text, client.zrange(keys.tenants(), 0, -1)) if is_valid_id(t))


def note_tenant(client: redis.Redis, keys: RedisKeys, tenant: str) -> bool:
    """Add ``tenant`` to the tenants index, if this credential may (a tenant's own may not:
    then its workers note it at their first claim); True when noted."""
    with contextlib.suppress(redis.exceptions.NoPermissionError):
        client.zadd(keys.tenants(), {tenant: now_ms()}, nx=True)
        return True
    return False


def active_sessions(
    client: redis.Redis, keys: RedisKeys, limit: int = -1, *, tenant: str | None = None
) -> list[tuple[str, str]]:
    """``(tenant, session)`` of every session with work: in the active index, or in a queued
    index (``tenant``'s alone when given, else every known tenant's), each once; at most
    ``limit`` per shard when given. Members that name no valid tenant and session are left
    out."""
    stop = limit - 1 if limit > 0 else -1
    shards = keys.active_shards()
    replies = _each_shard(client, shards, lambda p, k: p.zrange(k, 0, stop))
    found: dict[tuple[str, str], None] = {}
    for reply in replies:
        for member in reply:
            t, _, session_id = _text(member).partition("/")
            if is_valid_id(t) and is_valid_id(session_id) and tenant in (None, t):
                found[(t, session_id)] = None
    tenants = [tenant] if tenant is not None else known_tenants(client, keys)
    queued = [(t, keys.tenant_queued_shard(t, n)) for t in tenants for n in range(QUEUED_SHARDS)]
    replies = _each_shard(client, [k for _, k in queued], lambda p, k: p.zrange(k, 0, stop))
    for (t, _), reply in zip(queued, replies, strict=True):
        for member in reply:
            session_id = _text(member)
            if is_valid_id(session_id):
                found[(t, session_id)] = None
    return list(found)


def active_count(client: redis.Redis, keys: RedisKeys) -> int:
    """How many sessions have work (:func:`active_sessions`, counted)."""
    return len(active_sessions(client, keys))
