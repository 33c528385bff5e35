"""Tenant usage on Redis: ``usage_add.lua`` counts a run once (queued by the run queue's
finish into the round trip it makes anyway, see :meth:`RedisTenantUsage.queue_add`) and takes
it out of the day's in-flight record, which ``usage_inflight.lua`` sets at each step boundary of
a run of a budgeted tenant (one round trip: set, then read the day and the record's sums), and
``tenant_admit.lua`` checks a submission against the budget without writing
(:class:`RedisTenantAdmission`, the part a producer uses; its asyncio twin is
:mod:`tether.runs.usage.redis_aio`), and ``tenant_rate.lua`` takes a run's place in the
per-minute rate when a worker starts it. Producers only read these keys: they are outside the
tenant's own keyspace (:meth:`~tether.keys.RedisKeys.tenant_usage`), so no tenant can reset
its budget. A tenant's counters are spread over :data:`~tether.keys.USAGE_SHARDS` shards, a
run counted in the shard of its run id (so no slot is written by every run of a tenant);
every key a script touches is in that one shard's slot, so a Redis Cluster runs each script
on one node, and readers sum the shards in one pipelined round trip."""

from __future__ import annotations

import time
from typing import Any, cast

import redis

from tether.core.events import Usage
from tether.keys import USAGE_SHARDS, RedisKeys, usage_shard_of
from tether.persistence.lua import load
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.persistence.scripts import queue_script, run_pipeline
from tether.runs.usage.base import (
    ADMITTED,
    BURST_S,
    DAY_TTL_S,
    NANO,
    DayUsage,
    Verdict,
    has_tokens,
    nano_usd,
    utc_day,
)
from tether.settings.budgets import TenantBudget

ADD = load("usage_add")
IN_FLIGHT = load("usage_inflight")
RATE = load("tenant_rate")
_FIELDS = (b"input", b"output", b"cached", b"reasoning", b"runs", b"unpriced", b"cost_nano")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisTenantAdmission:
    """The budget check of a submission (what a producer needs of :class:`RedisTenantUsage`):
    plain reads in one pipelined round trip (:func:`queue_admit_reads`), which a tenant's
    read-only access to its usage allows (no script: Redis checks a script's keys for writing).

    Args:
        client: a bytes Redis client.
        keys: the key schema (namespace).
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._where = describe_client(client)

    def admit(self, tenant: str, budget: TenantBudget, *, runs: int = 1) -> Verdict:
        """See :meth:`~tether.runs.usage.base.TenantUsage.admit`."""
        with translate_errors(self._where):
            pipe = self._client.pipeline(transaction=False)
            queue_admit_reads(pipe, self._keys, tenant)
            replies = pipe.execute()
        return admit_verdict(replies, budget, runs)


class RedisTenantUsage(RedisTenantAdmission):
    """:class:`~tether.runs.usage.base.TenantUsage` for the fleet.

    Args:
        client: a bytes Redis client.
        keys: the key schema (namespace).
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        super().__init__(client, keys)
        self._add = client.register_script(ADD.source)
        self._in_flight = client.register_script(IN_FLIGHT.source)
        self._rate = client.register_script(RATE.source)

    def take_rate(self, tenant: str, budget: TenantBudget, run_id: str) -> Verdict:
        if not budget.runs_per_minute:
            return ADMITTED
        _, _, rate = self._keys.tenant_usage(tenant, utc_day())
        keys = RATE.keys(rate=rate, taken=self._keys.tenant_rate_taken(tenant, run_id))
        argv = RATE.argv(us_per_run=budget.us_per_run, burst_us=int(BURST_S * 1_000_000))
        with translate_errors(self._where):
            reply = RATE.reply(cast(list[Any], self._rate(keys=keys, args=argv)))
        if int(reply["admitted"]):
            return ADMITTED
        return Verdict(False, "runs_per_minute", 1.0, int(reply["wait_us"]) / 1e6)

    @property
    def add_script(self) -> Any:
        """The registered ``usage_add`` script (for :func:`run_pipeline`)."""
        return self._add

    def queue_add(
        self,
        pipe: Any,
        tenant: str,
        run_id: str,
        usage: Usage,
        cost_usd: float | None,
        *,
        at_ms: int,
    ) -> None:
        """Queue :meth:`add` on ``pipe`` (a pipeline the caller runs with :func:`run_pipeline`
        and :attr:`add_script`); its reply is :meth:`add`'s, as 1 or 0."""
        day, counted, inflight = self._keys.usage_shard(
            tenant, utc_day(at_ms), usage_shard_of(run_id)
        )
        argv = ADD.argv(
            run_id=run_id,
            ttl_s=DAY_TTL_S,
            input=usage.input_tokens,
            output=usage.output_tokens,
            cached=usage.cached_tokens,
            reasoning=usage.reasoning_tokens,
            cost_nano=nano_usd(cost_usd),
            unpriced=int(cost_usd is None),
        )
        queue_script(pipe, self._add, ADD.keys(day=day, counted=counted, inflight=inflight), argv)

    def add(
        self, tenant: str, run_id: str, usage: Usage, cost_usd: float | None, *, at_ms: int
    ) -> bool:
        def fill(pipe: Any) -> None:
            self.queue_add(pipe, tenant, run_id, usage, cost_usd, at_ms=at_ms)

        with translate_errors(self._where):
            return bool(int(run_pipeline(self._client, [self._add], fill)[0]))

    def day(self, tenant: str, *, at_ms: int | None = None) -> DayUsage:
        day = utc_day(at_ms)
        with translate_errors(self._where):
            pipe = self._client.pipeline(transaction=False)
            for shard in range(USAGE_SHARDS):
                pipe.hmget(self._keys.usage_shard(tenant, day, shard)[0], list(_FIELDS))
            replies = cast(list[list[Any]], pipe.execute())
        return _summed(day, replies)

    def _others(self, tenant: str, day: str, but: int) -> DayUsage:
        """The day with its runs in flight, over every shard but ``but`` (one round trip)."""
        with translate_errors(self._where):
            pipe = self._client.pipeline(transaction=False)
            for shard in range(USAGE_SHARDS):
                if shard != but:
                    counters, _, inflight = self._keys.usage_shard(tenant, day, shard)
                    pipe.hmget(counters, list(_FIELDS))
                    pipe.hmget(inflight, [b"~" + f for f in _FIELDS])
            replies = cast(list[list[Any]], pipe.execute())
        return _summed(day, replies)

    def in_flight(
        self,
        tenant: str,
        run_id: str | None,
        usage: Usage,
        cost_usd: float | None,
        *,
        at_ms: int | None = None,
    ) -> DayUsage:
        day = utc_day(at_ms)
        shard = usage_shard_of(run_id) if run_id is not None else 0
        key, _, inflight = self._keys.usage_shard(tenant, day, shard)
        publish = run_id is not None and has_tokens(usage)
        keys = IN_FLIGHT.keys(day=key, inflight=inflight)
        argv = IN_FLIGHT.argv(
            run_id=run_id if publish else "",
            usage=inflight_value(usage, cost_usd) if publish else "",
            ttl_s=DAY_TTL_S,
        )
        with translate_errors(self._where):
            raw = cast(list[Any], self._in_flight(keys=keys, args=argv))
        mine = _day_usage(day, raw[:7]).merged(_day_usage(day, raw[7:]))
        return mine.merged(self._others(tenant, day, shard))


def inflight_value(usage: Usage, cost_usd: float | None) -> str:
    """A run's field in its tenant's in-flight record (``lib/inflight.lua``)."""
    return ",".join(
        str(n)
        for n in (
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_tokens,
            usage.reasoning_tokens,
            nano_usd(cost_usd),
            int(cost_usd is None),
        )
    )


def _summed(day: str, replies: list[list[Any]]) -> DayUsage:
    """The day's counters summed over the replies of several shards (each in :data:`_FIELDS`
    order)."""
    total = DayUsage(day, 0, 0, 0, 0, 0, 0, 0)
    for raw in replies:
        total = total.merged(_day_usage(day, raw))
    return total


def _day_usage(day: str, raw: list[Any]) -> DayUsage:
    """A day's counters from their values in :data:`_FIELDS` order (None: 0)."""
    n = [int(v) if v is not None else 0 for v in raw]
    return DayUsage(day, n[0], n[1], n[2], n[3], n[4], n[5], n[6])


def queue_admit_reads(pipe: Any, keys: RedisKeys, tenant: str) -> None:
    """Queue on ``pipe`` the reads :func:`admit_verdict` decides on: ``tenant``'s day (tokens and
    cost) and its unfinished runs' sums from the in-flight record, in every shard, then its
    rate's state."""
    name = utc_day()
    for shard in range(USAGE_SHARDS):
        day, _, inflight = keys.usage_shard(tenant, name, shard)
        pipe.hmget(day, ["input", "output", "cost_nano"])
        pipe.hmget(inflight, ["~input", "~output", "~cost_nano"])
    pipe.get(keys.tenant_usage(tenant, name)[2])


def admit_verdict(replies: list[Any], budget: TenantBudget, runs: int) -> Verdict:
    """Whether ``runs`` submissions fit ``budget``, from the replies of
    :func:`queue_admit_reads`: the day (with its unfinished runs) against the tokens and USD
    limits, then the runs against the per-minute rate as workers took it (a limit of 0 is
    none). The rate is read on this process's clock: workers take it on the server's
    (``tenant_rate.lua``), so a skewed clock only moves when a submission is refused here."""
    *shards, rate = replies
    tokens = sum(_count(v) for reply in shards for v in reply[:2])
    cost_nano = sum(_count(reply[2]) for reply in shards)
    if budget.tokens_per_day and tokens >= budget.tokens_per_day:
        return Verdict(False, "tokens_per_day", float(tokens))
    if budget.usd_per_day and cost_nano >= round(budget.usd_per_day * NANO):
        return Verdict(False, "usd_per_day", cost_nano / NANO)
    if budget.runs_per_minute:
        now_us = int(time.time() * 1_000_000)
        tat_us = max(_count(rate), now_us)
        over_us = tat_us + budget.us_per_run * max(1, runs) - now_us - int(BURST_S * 1_000_000)
        if over_us > 0:
            return Verdict(False, "runs_per_minute", float(runs), over_us / 1e6)
    return ADMITTED


def _count(raw: Any) -> int:
    """A counter's value (None, or anything that is no integer: 0)."""
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        return 0
