"""Contract of :class:`tether.runs.usage.base.TenantUsage`: memory, a redis-server and a 3-master
cluster pass the same tests (a run counted once into its tenant's UTC day, budgets refusing a
submission, unfinished runs' usage counted with the day at step boundaries), and the run queue's
finish counts a run's usage (once, in its round trip) and takes it out of the in-flight record."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tether.core.events import Usage, now_ms
from tether.core.results import RunStatus
from tether.errors import BudgetExceeded, TetherError
from tether.keys import RedisKeys, usage_shard_of
from tether.persistence.redis_conn import redis_from_url
from tether.runs.contract import RunRequest, RunResult
from tether.runs.leases.memory import InMemoryLeaseManager
from tether.runs.queue.base import RunQueue
from tether.runs.queue.memory import InMemoryRunQueue
from tether.runs.queue.redis import RedisRunQueue
from tether.runs.usage.base import DAY_TTL_S, TenantUsage, exceeded, spent, utc_day
from tether.runs.usage.policy import admit_submission
from tether.runs.usage.redis import RedisTenantUsage
from tether.settings import Settings
from tether.settings.budgets import TenantBudget
from tether.worker.engine.spend import spend_check

CALL = Usage(input_tokens=1000, output_tokens=100, total_tokens=1100, cached_tokens=200)
NOON_MS = 1_796_000_000_000  # 2026-11-30 (UTC), a fixed day for the day tests
Backend = tuple[TenantUsage, RunQueue]


@pytest.fixture(params=["memory", "redis", "cluster"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A tenant usage and a run queue over the same state."""
    if request.param == "memory":
        queue = InMemoryRunQueue(InMemoryLeaseManager())
        yield queue.tenant_usage, queue
        return
    url = request.getfixturevalue("cluster_url" if request.param == "cluster" else "redis_url")
    client = redis_from_url(url)
    redis_queue = RedisRunQueue(client, RedisKeys(f"use-{uuid.uuid4().hex[:8]}"), result_ttl_s=60)
    yield redis_queue.tenant_usage, redis_queue
    client.close()


def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def test_a_run_is_counted_once_into_its_day(backend: Backend) -> None:
    usage, _ = backend
    t = tenant()
    assert usage.add(t, "r-1", CALL, 0.25, at_ms=NOON_MS)
    assert not usage.add(t, "r-1", CALL, 0.25, at_ms=NOON_MS)  # a redo after a crash
    assert usage.add(t, "r-2", CALL + CALL, None, at_ms=NOON_MS)
    day = usage.day(t, at_ms=NOON_MS)
    assert day.day == utc_day(NOON_MS) == "20261130"
    assert (day.input_tokens, day.output_tokens, day.cached_tokens) == (3000, 300, 600)
    assert (day.tokens, day.runs, day.unpriced_runs) == (3300, 2, 1)
    assert day.cost_usd == pytest.approx(0.25)
    assert usage.day(t, at_ms=NOON_MS + 86_400_000).runs == 0  # the next day starts at 0
    assert usage.day(tenant(), at_ms=NOON_MS).runs == 0  # tenants never mix


def test_budgets_refuse_a_spent_day(backend: Backend) -> None:
    usage, _ = backend
    t = tenant()
    now = now_ms()
    tokens, dollars = TenantBudget(tokens_per_day=2000), TenantBudget(usd_per_day=0.5)
    assert usage.admit(t, tokens).admitted and usage.admit(t, dollars).admitted
    usage.add(t, "r-1", CALL, 0.3, at_ms=now)
    assert usage.admit(t, tokens).admitted  # 1100 of 2000
    usage.add(t, "r-2", CALL, 0.3, at_ms=now)
    by_tokens, by_cost = usage.admit(t, tokens), usage.admit(t, dollars)
    assert (by_tokens.admitted, by_tokens.budget, by_tokens.used) == (False, "tokens_per_day", 2200)
    assert (by_cost.admitted, by_cost.budget) == (False, "usd_per_day")
    assert by_cost.used == pytest.approx(0.6)
    message = str(exceeded(t, dollars, by_cost, utc_day(now)))
    assert t in message and "usd_per_day=0.5" in message and "0.6 USD" in message
    assert "resets at" in message and "TETHER_TENANT_BUDGETS" in message


def test_runs_per_minute_admits_a_minute_at_once_then_refuses(backend: Backend) -> None:
    # the workers take the rate as runs start (take_rate); a submission only reads it (admit)
    usage, _ = backend
    t = tenant()
    budget = TenantBudget(runs_per_minute=6)
    assert usage.admit(t, budget, runs=6).admitted
    assert not usage.admit(t, budget, runs=7).admitted  # more than a minute's at once
    for n in range(4):
        assert usage.take_rate(t, budget, f"r-{n}").admitted
    assert usage.admit(t, budget, runs=2).admitted  # admit took nothing: two places left
    assert not usage.admit(t, budget, runs=3).admitted
    for n in range(4, 6):
        assert usage.take_rate(t, budget, f"r-{n}").admitted
    refused = usage.take_rate(t, budget, "r-6")
    assert (refused.admitted, refused.budget) == (False, "runs_per_minute")
    assert 0 < refused.retry_after_s <= 10  # one run's interval, 10 s
    at_submit = usage.admit(t, budget, runs=1)
    assert (at_submit.admitted, at_submit.budget) == (False, "runs_per_minute")
    assert usage.admit(tenant(), budget, runs=6).admitted  # another tenant has its own rate
    with pytest.raises(BudgetExceeded, match="runs_per_minute=6"):
        raise exceeded(t, budget, refused, utc_day())


def test_a_run_takes_its_place_in_the_rate_once(backend: Backend) -> None:
    # a retried or resumed attempt of a run that took its place takes none again
    usage, _ = backend
    t = tenant()
    budget = TenantBudget(runs_per_minute=2)
    assert usage.take_rate(t, budget, "r-1").admitted
    assert usage.take_rate(t, budget, "r-1").admitted
    assert usage.take_rate(t, budget, "r-1").admitted
    assert usage.take_rate(t, budget, "r-2").admitted
    assert not usage.take_rate(t, budget, "r-3").admitted
    assert usage.take_rate(t, budget, "r-2").admitted  # taken already: admitted again
    assert usage.take_rate(t, TenantBudget(), "r-9").admitted  # no rate: nothing to take


def _result(t: str, run_id: str, usage: Usage, cost: float | None) -> RunResult:
    return RunResult(
        run_id=run_id,
        request_id=run_id,
        session_id="s-1",
        tenant=t,
        status=RunStatus.COMPLETED,
        usage=usage,
        cost_usd=cost,
    )


def test_finish_counts_a_run_once_and_a_run_without_tokens_not_at_all(backend: Backend) -> None:
    usage, queue = backend
    t = tenant()
    queue.finish(_result(t, "r-1", CALL, 0.002))
    queue.finish(_result(t, "r-1", CALL, 0.002))  # finished again after a crash
    queue.finish(_result(t, "r-2", Usage(), None))
    day = usage.day(t)
    assert (day.runs, day.tokens, day.unpriced_runs) == (1, 1100, 0)
    assert day.cost_usd == pytest.approx(0.002)


def test_a_tenant_without_a_budget_costs_no_redis_command_at_submit(redis_url: str) -> None:
    client = redis_from_url(redis_url)
    usage = RedisTenantUsage(client, RedisKeys(f"use-{uuid.uuid4().hex[:8]}"))
    settings = Settings(tenant_budgets='{"capped": {"runs_per_minute": 1}}')
    free = RunRequest(
        run_id="r-1", request_id="r-1", tenant="free", session_id="s", input="hi", agent="echo"
    )

    def commands() -> int:
        return int(client.info("stats")["total_commands_processed"])

    idle = -commands() + commands()  # what reading the counter costs
    before = commands()
    admit_submission(usage, settings, [free, free])
    assert commands() - before == idle
    capped = free.model_copy(update={"tenant": "capped"})
    before = commands()
    admit_submission(usage, settings, [capped])
    assert commands() - before > idle  # its script ran (the counter counts its commands too)
    with pytest.raises(BudgetExceeded, match="runs_per_minute=1"):
        admit_submission(usage, settings, [capped, capped])
    client.close()


def test_a_tenant_credential_reads_its_usage_and_cannot_write_it(redis_server: Any) -> None:
    """#47 B1: usage, in-flight and rate state are outside the tenant's keyspace: its producer
    reads its day (and admits), and every write a tenant could use to reset its budget is
    refused by the server (NOPERM)."""
    admin = redis.Redis.from_url(redis_server.url)
    ns = f"use-{uuid.uuid4().hex[:8]}"
    keys = RedisKeys(ns)
    workers = RedisTenantUsage(admin, keys)
    run = _result("acme", "r-1", CALL, 0.002)
    workers.add("acme", "r-1", run.usage, run.cost_usd, at_ms=now_ms())
    workers.in_flight("acme", "r-2", CALL, 0.001)
    assert workers.take_rate("acme", TenantBudget(runs_per_minute=6), "r-3").admitted
    user = f"acme-{uuid.uuid4().hex[:6]}"
    admin.acl_setuser(
        user, enabled=True, passwords=["+pw-acme"], keys=keys.tenant_acl_keys("acme"),
        commands=["+@all", "-@admin", "-@dangerous"],
    )  # fmt: skip
    acme = redis.Redis.from_url(redis_server.url, username=user, password="pw-acme")
    try:
        as_acme = RedisTenantUsage(acme, keys)
        assert as_acme.day("acme").tokens == 1100  # it reads its own
        assert as_acme.admit("acme", TenantBudget(tokens_per_day=5000)).admitted
        day, counted, inflight = keys.usage_shard("acme", utc_day(), 5)
        rate = keys.tenant_usage("acme", utc_day())[2]
        for key in (day, counted, rate, inflight):
            with pytest.raises(redis.exceptions.NoPermissionError):
                acme.delete(key)
        with pytest.raises(redis.exceptions.NoPermissionError):
            acme.hset(day, "input", 0)
        with pytest.raises(TetherError):  # the worker's scripts write: refused as the tenant
            as_acme.take_rate("acme", TenantBudget(runs_per_minute=6), "r-4")
        assert workers.day("acme").tokens == 1100  # untouched
        with pytest.raises(redis.exceptions.NoPermissionError):  # and no other tenant's
            acme.get(keys.usage_shard("bob", utc_day(), 0)[0])
    finally:
        acme.close()
        admin.acl_deluser(user)
        admin.close()


def test_in_flight_runs_count_with_the_day_until_their_finish_moves_them(backend: Backend) -> None:
    # The step-boundary budget check (worker/engine/spend.py) of concurrent runs: each sets what
    # it used so far (set, not added) and sees the day plus every unfinished run's usage
    usage, queue = backend
    t, now = tenant(), now_ms()
    queue.finish(_result(t, "r-0", CALL, 0.001))  # one run finished today: 1100
    seen = usage.in_flight(t, "r-1", CALL, 0.001, at_ms=now)
    assert (seen.tokens, seen.runs, seen.cost_usd) == (2200, 2, pytest.approx(0.002))
    again = usage.in_flight(t, "r-1", CALL, 0.001, at_ms=now)  # a boundary seen again, a retry
    assert (again.tokens, again.runs) == (2200, 2)
    both = usage.in_flight(t, "r-2", CALL + CALL, None, at_ms=now)  # another run, unpriced
    assert (both.tokens, both.runs, both.unpriced_runs) == (4400, 3, 1)
    assert both.cached_tokens == 4 * 200 and both.cost_usd == pytest.approx(0.002)
    grown = usage.in_flight(t, "r-1", CALL + CALL, 0.002, at_ms=now)  # r-1's next step
    assert (grown.tokens, grown.runs, grown.cost_usd) == (5500, 3, pytest.approx(0.003))
    read = usage.in_flight(t, None, Usage(), None, at_ms=now)  # no run id yet: a read only
    assert (read.tokens, read.runs) == (5500, 3)
    tokenless = usage.in_flight(t, "r-3", Usage(), None, at_ms=now)  # no tokens: nothing set
    assert (tokenless.tokens, tokenless.runs) == (5500, 3)
    assert usage.day(t).tokens == 1100  # the day itself counts finished runs only
    queue.finish(_result(t, "r-1", CALL + CALL, 0.002))  # from in flight into the day, at once
    moved = usage.in_flight(t, None, Usage(), None, at_ms=now)
    assert (moved.tokens, moved.runs, moved.cost_usd) == (5500, 3, pytest.approx(0.003))
    assert (usage.day(t).tokens, usage.day(t).runs) == (3300, 2)
    queue.finish(_result(t, "r-1", CALL + CALL, 0.002))  # a finish redone after a crash
    assert usage.in_flight(t, None, Usage(), None, at_ms=now).tokens == 5500
    queue.finish(_result(t, "r-2", CALL + CALL, None))
    done = usage.in_flight(t, None, Usage(), None, at_ms=now)
    assert (done.tokens, done.runs, done.unpriced_runs) == (5500, 3, 1)
    assert done == usage.day(t)  # nothing left in flight
    assert usage.in_flight(tenant(), None, Usage(), None).tokens == 0  # tenants never mix
    assert usage.in_flight(t, None, Usage(), None, at_ms=now + 86_400_000).tokens == 0


def test_in_flight_usage_holds_a_budget_for_runs_that_have_not_finished(backend: Backend) -> None:
    usage, _ = backend
    t = tenant()
    budget = TenantBudget(tokens_per_day=2500)
    assert spent(budget, usage.in_flight(t, "r-1", CALL, 0.001)).admitted
    assert spent(budget, usage.in_flight(t, "r-2", CALL, 0.001)).admitted  # 2200
    verdict = spent(budget, usage.in_flight(t, "r-3", CALL, 0.001))  # 3300: none finished yet
    assert (verdict.admitted, verdict.budget, verdict.used) == (False, "tokens_per_day", 3300)
    assert spent(budget, usage.in_flight(tenant(), "r-1", CALL, 0.001)).admitted


def test_a_submission_is_refused_on_the_unfinished_runs_usage_too(backend: Backend) -> None:
    """Admission read the finished runs' day alone: with the unfinished runs over the budget, a
    new run was admitted, only to stop before its first step (its input kept in memory)."""
    usage, _ = backend
    t = tenant()
    budget = TenantBudget(tokens_per_day=2500)
    assert usage.admit(t, budget).admitted
    usage.in_flight(t, "r-1", CALL, 0.001)
    usage.in_flight(t, "r-2", CALL, 0.001)
    assert usage.admit(t, budget).admitted  # 2,200 so far
    usage.in_flight(t, "r-3", CALL, 0.001)
    verdict = usage.admit(t, budget)  # 3,300, none finished
    assert (verdict.admitted, verdict.budget, verdict.used) == (False, "tokens_per_day", 3300)
    assert usage.admit(tenant(), budget).admitted  # another tenant's runs are its own


def test_the_in_flight_record_expires_like_the_day(redis_url: str) -> None:
    client = redis_from_url(redis_url)
    keys = RedisKeys(f"use-{uuid.uuid4().hex[:8]}")
    usage, t, now = RedisTenantUsage(client, keys), tenant(), now_ms()
    usage.in_flight(t, "r-1", CALL, 0.001, at_ms=now)
    counters, _, inflight = keys.usage_shard(t, utc_day(now), usage_shard_of("r-1"))
    assert 0 < client.ttl(inflight) <= DAY_TTL_S
    usage.add(t, "r-1", CALL, 0.001, at_ms=now)
    assert client.hget(inflight, "r-1") is None
    assert 0 < client.ttl(counters) <= DAY_TTL_S
    client.close()


def test_a_tenant_without_a_tokens_or_usd_budget_gets_no_step_check(backend: Backend) -> None:
    # no check, so no in-flight record and no Redis command at its runs' step boundaries
    usage, _ = backend
    settings = Settings(
        tenant_budgets='{"rated": {"runs_per_minute": 1}, "capped": {"tokens_per_day": 9}}'
    )
    session: Any = None  # the check reads the session only when called
    assert spend_check(settings, usage, "rated", "m", session, 1) is None
    assert spend_check(settings, usage, "free", "m", session, 1) is None
    assert spend_check(settings, usage, "capped", "m", session, 1) is not None
