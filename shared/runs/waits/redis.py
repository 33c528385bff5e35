"""The wait index on Redis: each session's parked calls in its own hash (its slot, beside its
runs), the wake times in the sharded timers index (:meth:`tether.keys.RedisKeys.timers`), due
members taken by one script per shard (``timers_take.lua``)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import redis

from tether.core.events import now_ms
from tether.keys import RedisKeys
from tether.persistence.lua import load
from tether.persistence.scripts import queue_script, run_pipeline
from tether.runs.waits.base import REDELIVER_MS, TimerMember, WaitRecord

TIMERS_TAKE = load("timers_take")
WAITS_EPOCH = load("waits_epoch")


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class RedisWaitIndex:
    """:class:`~tether.runs.waits.base.WaitIndex` on a Redis or a Redis Cluster."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, *, redeliver_ms: int = REDELIVER_MS):
        self._client = client
        self._keys = keys
        self._redeliver_ms = redeliver_ms
        self._shards = itertools.cycle(range(len(keys.timer_shards())))
        self._take = client.register_script(TIMERS_TAKE.source)
        self._epoch = client.register_script(WAITS_EPOCH.source)
        self._seen = 0  # the epoch this index wrote last

    def park(self, records: Sequence[WaitRecord]) -> None:
        if not records:
            return
        pipe = self._client.pipeline(transaction=False)
        for r in records:
            pipe.hset(
                self._keys.session_waits(r.tenant, r.session_id), r.call_id, r.model_dump_json()
            )
            wake_at_ms = r.wait_for.wake_at_ms
            if wake_at_ms is not None:  # NX: a member a sweeper took keeps its later score
                pipe.zadd(
                    self._keys.timers(r.tenant, r.session_id),
                    {r.member.text(): wake_at_ms},
                    nx=True,
                )
        pipe.execute()

    def settle(self, tenant: str, session_id: str, call_ids: Sequence[str]) -> None:
        if not call_ids:
            return
        pipe = self._client.pipeline(transaction=False)
        pipe.hdel(self._keys.session_waits(tenant, session_id), *call_ids)
        members = [TimerMember(tenant, session_id, c).text() for c in call_ids]
        pipe.zrem(self._keys.timers(tenant, session_id), *members)
        pipe.execute()

    def records(self, tenant: str, session_id: str) -> list[WaitRecord]:
        raw = self._client.hvals(self._keys.session_waits(tenant, session_id))
        return [WaitRecord.model_validate_json(v) for v in raw]

    def take_due(self, now_ms: int, *, limit: int = 100) -> list[TimerMember]:
        shards = self._keys.timer_shards()
        start = next(self._shards)  # sweepers start at different shards: less contention
        order = shards[start:] + shards[:start]
        argv = TIMERS_TAKE.argv(now_ms=now_ms, limit=limit, redeliver_ms=self._redeliver_ms)

        def fill(pipe: Any) -> None:
            for shard in order:
                queue_script(pipe, self._take, TIMERS_TAKE.keys(shard=shard), argv)

        taken: list[TimerMember] = []
        for reply in run_pipeline(self._client, [self._take], fill):
            if isinstance(reply, Exception):
                raise reply
            taken.extend(m for m in map(TimerMember.parse, map(_text, reply)) if m is not None)
        return taken

    def done(self, members: Sequence[TimerMember]) -> None:
        if not members:
            return
        pipe = self._client.pipeline(transaction=False)
        for m in members:
            pipe.zrem(self._keys.timers(m.tenant, m.session_id), m.text())
        pipe.execute()

    def get_many(self, members: Sequence[TimerMember]) -> list[WaitRecord | None]:
        if not members:
            return []
        pipe = self._client.pipeline(transaction=False)
        for m in members:
            pipe.hget(self._keys.session_waits(m.tenant, m.session_id), m.call_id)
        return [None if v is None else WaitRecord.model_validate_json(v) for v in pipe.execute()]

    def recorded(self, sessions: Sequence[tuple[str, str]]) -> list[bool]:
        if not sessions:
            return []
        pipe = self._client.pipeline(transaction=False)
        for tenant, session_id in sessions:
            pipe.exists(self._keys.session_waits(tenant, session_id))
        return [bool(v) for v in pipe.execute()]

    def next_due_ms(self) -> int | None:
        pipe = self._client.pipeline(transaction=False)
        for shard in self._keys.timer_shards():
            pipe.zrange(shard, 0, 0, withscores=True)
        firsts = [int(first[0][1]) for first in pipe.execute() if first]
        return min(firsts) if firsts else None

    def lost(self) -> bool:
        # the epoch grows at every call while Redis keeps what it was told: missing, Redis is
        # fresh or flushed; smaller than one this index wrote, Redis went back to an older state
        key = self._keys.timer_shards()[0] + ":sentinel"
        raw = self._epoch(keys=WAITS_EPOCH.keys(epoch=key), args=WAITS_EPOCH.argv(now_ms=now_ms()))
        reply = WAITS_EPOCH.reply(raw)
        seen, self._seen = self._seen, int(reply["new"])  # gone back or not: the epoch now
        return not reply["old"] or int(reply["old"]) < seen

    def take_reconcile(self, owner: str, ttl_ms: int) -> bool:
        key = self._keys.timer_shards()[0] + ":reconcile"
        return bool(self._client.set(key, owner, nx=True, px=max(1, ttl_ms)))

    def counts(self) -> dict[str, int]:
        """How many calls wait in the timers index (``timers`` key), for gauges."""
        pipe = self._client.pipeline(transaction=False)
        for shard in self._keys.timer_shards():
            pipe.zcard(shard)
        return {"timers": sum(int(n) for n in pipe.execute())}
