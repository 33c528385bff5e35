"""Tenant usage on Redis: ``usage_add.lua`` counts a run once (queued by the run queue's
finish into the round trip it makes anyway, see :meth:`RedisTenantUsage.queue_add`) and takes
it out of the day's in-flight record, which ``usage_inflight.lua`` sets at each step boundary of
a run of a budgeted tenant (one round trip: set, then read the day and the record's sums), and
``tenant_admit.lua`` admits a submission (:class:`RedisTenantAdmission`, the part a producer
uses; its asyncio twin is :mod:`tether.runs.usage.redis_aio`). Every key of a tenant's usage
shares its slot, so a Redis Cluster runs each script on one node."""

from __future__ import annotations

from typing import Any, cast

import redis

from tether.core.events import Usage
from tether.keys import RedisKeys
from tether.persistence.lua import load
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.persistence.scripts import queue_script, run_pipeline
from tether.runs.usage.base import (
    ADMITTED,
    BURST_S,
    DAY_TTL_S,
    NANO,
    BudgetName,
    DayUsage,
    Verdict,
    has_tokens,
    nano_usd,
    utc_day,
)
from tether.settings.budgets import TenantBudget

ADD = load("usage_add")
IN_FLIGHT = load("usage_inflight")
ADMIT = load("tenant_admit")
_FIELDS = (b"input", b"output", b"cached", b"reasoning", b"runs", b"unpriced", b"cost_nano")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisTenantAdmission:
    """The budget check of a submission, ``tenant_admit.lua`` (what a producer needs of
    :class:`RedisTenantUsage`).

    Args:
        client: a bytes Redis client.
        keys: the key schema (namespace).
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._where = describe_client(client)
        self._admit = client.register_script(ADMIT.source)

    def admit(self, tenant: str, budget: TenantBudget, *, runs: int = 1) -> Verdict:
        """See :meth:`~tether.runs.usage.base.TenantUsage.admit`."""
        keys, argv = admit_call(self._keys, tenant, budget, runs)
        with translate_errors(self._where):
            return verdict_of(cast(list[Any], self._admit(keys=keys, args=argv)))


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
        name = utc_day(at_ms)
        day, counted, _ = self._keys.tenant_usage(tenant, name)
        inflight = self._keys.tenant_inflight(tenant, name)
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
        key, _, _ = self._keys.tenant_usage(tenant, day)
        with translate_errors(self._where):
            raw = cast(list[Any], self._client.hmget(key, list(_FIELDS)))
        return _day_usage(day, raw)

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
        key, _, _ = self._keys.tenant_usage(tenant, day)
        publish = run_id is not None and has_tokens(usage)
        keys = IN_FLIGHT.keys(day=key, inflight=self._keys.tenant_inflight(tenant, day))
        argv = IN_FLIGHT.argv(
            run_id=run_id if publish else "",
            usage=inflight_value(usage, cost_usd) if publish else "",
            ttl_s=DAY_TTL_S,
        )
        with translate_errors(self._where):
            raw = cast(list[Any], self._in_flight(keys=keys, args=argv))
        return _day_usage(day, raw[:7]).merged(_day_usage(day, raw[7:]))


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


def _day_usage(day: str, raw: list[Any]) -> DayUsage:
    """A day's counters from their values in :data:`_FIELDS` order (None: 0)."""
    n = [int(v) if v is not None else 0 for v in raw]
    return DayUsage(day, n[0], n[1], n[2], n[3], n[4], n[5], n[6])


def admit_call(
    keys: RedisKeys, tenant: str, budget: TenantBudget, runs: int
) -> tuple[list[Any], list[Any]]:
    """The KEYS and ARGV of ``tenant_admit.lua`` for ``runs`` submissions under ``budget``."""
    name = utc_day()
    day, _, rate = keys.tenant_usage(tenant, name)
    argv = ADMIT.argv(
        tokens_per_day=budget.tokens_per_day,
        cost_nano_per_day=round(budget.usd_per_day * NANO),
        us_per_run=budget.us_per_run,
        runs=max(1, runs),
        burst_us=int(BURST_S * 1_000_000),
    )
    return ADMIT.keys(day=day, rate=rate, inflight=keys.tenant_inflight(tenant, name)), argv


def verdict_of(raw: list[Any]) -> Verdict:
    """The script's reply as a :class:`Verdict`."""
    reply = ADMIT.reply(raw)
    if int(reply["admitted"]):
        return ADMITTED
    name = cast(BudgetName, _text(reply["budget"]))
    used = float(_text(reply["used"]))
    if name == "usd_per_day":
        used /= NANO
    return Verdict(False, name, used, int(reply["wait_us"]) / 1e6)
