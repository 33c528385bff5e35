"""Contract of :class:`tether.runs.limits.base.ModelBudget`: memory, a redis-server and a 3-master
cluster pass the same tests; on Redis two budgets (two workers) share one model's limits.

Timing assertions here are bounds a slow machine cannot break: an admission never comes sooner
than the limit allows, and a refusal says how long to wait.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tether.errors import ConfigurationError, ModelError
from tether.keys import RedisKeys
from tether.models.base import ModelRequest, ModelResponse
from tether.models.scripted import ScriptedModel
from tether.persistence.redis_conn import redis_from_url
from tether.runs.limits.base import ModelBudget
from tether.runs.limits.gate import BudgetedModel, budget_tenant, budget_waits
from tether.runs.limits.memory import InMemoryModelBudget
from tether.runs.limits.redis import RedisModelBudget
from tether.settings.limits import ModelLimit, ModelLimits

Factory = Callable[..., ModelBudget]

#: The fixtures' grace for a waiting call that stops asking: longer than any test's pause, so
#: the share tests never depend on how fast the machine is.
GRACE_S = 60.0


@pytest.fixture(params=["memory", "redis", "cluster"])
def budgets(request: pytest.FixtureRequest) -> Iterator[Factory]:
    """Makes budgets that share state (one process, or one Redis namespace); a waiting call
    counts for ``wait_grace_s`` after the poll it was told to make."""
    if request.param == "memory":
        shared: dict[float, InMemoryModelBudget] = {}

        def make_memory(wait_grace_s: float = GRACE_S) -> ModelBudget:
            return shared.setdefault(
                wait_grace_s, InMemoryModelBudget(slot_ttl_s=0.3, wait_grace_s=wait_grace_s)
            )

        yield make_memory
        return
    url = request.getfixturevalue("cluster_url" if request.param == "cluster" else "redis_url")
    keys = RedisKeys(f"budget-{uuid.uuid4().hex[:8]}")
    clients = []

    def make(wait_grace_s: float = GRACE_S) -> ModelBudget:
        client = redis_from_url(url)
        clients.append(client)
        return RedisModelBudget(
            client, keys, slot_ttl_ms=300, wait_grace_ms=int(wait_grace_s * 1000)
        )

    yield make
    for client in clients:
        client.close()


def model() -> str:
    return f"m-{uuid.uuid4().hex[:8]}"


def test_requests_per_minute_spaces_calls(budgets: Factory) -> None:
    budget, m = budgets(), model()
    limit = ModelLimit(requests_per_minute=600)  # one call per 100 ms
    assert budget.admit(m, limit, "a", 0).admitted
    refused = budget.admit(m, limit, "b", 0)
    assert not refused.admitted and refused.reason == "requests"
    assert 0 < refused.wait_s <= 0.1
    time.sleep(refused.wait_s + 0.005)
    assert budget.admit(m, limit, "b", 0).admitted


def test_no_window_admits_more_than_the_limit_plus_one(budgets: Factory) -> None:
    worker_a, worker_b, m = budgets(), budgets(), model()
    limit = ModelLimit(requests_per_minute=1200)  # 50 ms apart: 20 per second
    admitted: list[float] = []
    deadline = time.monotonic() + 1.2
    n = 0
    while time.monotonic() < deadline:
        n += 1
        budget = worker_a if n % 2 else worker_b
        if budget.admit(m, limit, f"t{n}", 0).admitted:
            admitted.append(time.monotonic())
    assert admitted, "nothing was admitted"
    for start in admitted:
        in_window = [t for t in admitted if start <= t < start + 1.0]
        assert len(in_window) <= 21  # 1 s / 50 ms, plus one (a little slack for the clocks)


def test_concurrency_slots_are_shared_and_freed(budgets: Factory) -> None:
    worker_a, worker_b, m = budgets(), budgets(), model()
    limit = ModelLimit(concurrent_requests=2)
    assert worker_a.admit(m, limit, "a", 0).admitted
    assert worker_b.admit(m, limit, "b", 0).admitted
    third = worker_a.admit(m, limit, "c", 0)
    assert not third.admitted and third.reason == "concurrency"
    worker_b.settle(m, limit, "b", 0)
    assert worker_a.admit(m, limit, "c", 0).admitted


def test_a_slot_of_a_call_that_never_settled_expires(budgets: Factory) -> None:
    budget, m = budgets(), model()
    limit = ModelLimit(concurrent_requests=1)
    assert budget.admit(m, limit, "dead", 0).admitted  # its worker dies: no settle
    assert not budget.admit(m, limit, "next", 0).admitted
    time.sleep(0.35)  # the fixtures' slot TTL is 0.3 s
    assert budget.admit(m, limit, "next", 0).admitted


def test_tokens_per_minute_charges_the_estimate_and_settles_the_truth(budgets: Factory) -> None:
    budget, m = budgets(), model()
    limit = ModelLimit(tokens_per_minute=60_000)  # 1 ms per token
    assert budget.admit(m, limit, "a", 500).admitted
    refused = budget.admit(m, limit, "b", 10)
    assert not refused.admitted and refused.reason == "tokens"
    assert 0 < refused.wait_s <= 0.5
    budget.settle(m, limit, "a", -500)  # it used none of its estimate: credited back
    assert budget.admit(m, limit, "b", 10).admitted


def test_a_pause_holds_every_worker_and_a_shorter_one_does_not_cut_it(budgets: Factory) -> None:
    worker_a, worker_b, m = budgets(), budgets(), model()
    limit = ModelLimit(requests_per_minute=60_000)
    worker_a.pause(m, 2.0)
    worker_b.pause(m, 0.1)
    answer = worker_b.admit(m, limit, "x", 0)
    assert not answer.admitted and answer.reason == "paused"
    assert 0.1 < answer.wait_s <= 2.0  # the longer pause stands
    other = model()
    assert worker_b.admit(other, limit, "y", 0).admitted  # other models go on


def test_limits_parse_from_json_or_a_file_and_refuse_bad_input(tmp_path: Path) -> None:
    limits = ModelLimits.parse('{"gpt-4o-mini": {"requests_per_minute": 300}, "free": {}}')
    assert limits.for_model("gpt-4o-mini") == ModelLimit(requests_per_minute=300)
    assert limits.for_model("free") is None and limits.for_model("other") is None
    assert ModelLimits.parse("").root == {}
    path = tmp_path / "limits.json"
    path.write_text('{"meta-llama/Llama-3-8B": {"concurrent_requests": 4}}')
    assert ModelLimits.parse(f"@{path}").for_model("meta-llama/Llama-3-8B") is not None
    for bad, says in [
        ("{nope", "not JSON"),
        ('{"m": {"requests_per_minute": -1}}', "m.requests_per_minute"),
        ('{"m": {"rpm": 5}}', "m.rpm"),
        ('{"has space": {}}', "model name"),
        ("@/no/such/file.json", "cannot be read"),
    ]:
        with pytest.raises(ConfigurationError, match="TETHER_MODEL_LIMITS") as caught:
            ModelLimits.parse(bad)
        assert says in str(caught.value) and "\n" not in str(caught.value)


class _Busy:
    """A model that answers 429 (with Retry-After) a few times, then answers."""

    def __init__(self, failures: int, retry_after_s: float = 0.05) -> None:
        self.failures = failures
        self.retry_after_s = retry_after_s
        self.calls = 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls <= self.failures:
            error = ModelError("HTTP 429 rate limited")
            error.status = 429  # type: ignore[attr-defined]
            error.retry_after_s = self.retry_after_s  # type: ignore[attr-defined]
            raise error
        return ModelResponse.final("ok")


def test_the_gate_waits_out_429s_for_the_fleet_and_reports_its_waits() -> None:
    budget = InMemoryModelBudget()
    limits = ModelLimits.parse('{"m": {"concurrent_requests": 1}}')
    inner = _Busy(failures=2)
    gated = BudgetedModel(inner, budget, limits)
    heard: list[str | None] = []
    token = budget_waits.set(heard.append)
    try:
        response = gated.complete(ModelRequest(model="m", items=()))
    finally:
        budget_waits.reset(token)
    assert response.text == "ok" and inner.calls == 3
    assert heard == ["paused", None, "paused", None]  # each 429 paused the model, then it went on
    assert budget.admit("m", limits.root["m"], "after", 0).admitted  # every slot was settled


def test_the_gate_gives_up_after_its_429_budget_and_costs_nothing_without_limits() -> None:
    budget = InMemoryModelBudget()
    limits = ModelLimits.parse('{"m": {"requests_per_minute": 60000}}')
    with pytest.raises(ModelError, match="429"):
        BudgetedModel(_Busy(failures=5), budget, limits, max_429_retries=2).complete(
            ModelRequest(model="m", items=())
        )

    class NoBudget:
        def admit(self, *args: object) -> None:
            raise AssertionError("an unlimited model asked the budget")

        settle = pause = admit

    free = BudgetedModel(ScriptedModel([ModelResponse.final("hi")]), NoBudget(), limits)  # type: ignore[arg-type]
    assert free.complete(ModelRequest(model="unlimited", items=())).text == "hi"


def test_a_day_long_retry_after_fails_the_call_instead_of_pausing_the_fleet() -> None:
    """A 429 saying ``Retry-After: 86400`` paused the model for every worker for a day: each
    run calling it held its slot, waiting, and nothing else could run. Past two minutes the
    call fails instead, and the model is not paused."""
    budget = InMemoryModelBudget()
    limits = ModelLimits.parse('{"m": {"concurrent_requests": 1}}')
    inner = _Busy(failures=1, retry_after_s=86_400)
    with pytest.raises(ModelError, match="Retry-After 86400 s"):
        BudgetedModel(inner, budget, limits).complete(ModelRequest(model="m", items=()))
    assert inner.calls == 1
    assert budget.admit("m", limits.root["m"], "after", 0).admitted  # not paused, slot freed


# --- fair shares between tenants (tether.runs.limits.shares) -----------------------------------
# A concurrency limit of 1 makes each test a sequence of turns, the same on every backend and on
# any machine: one slot, every tenant with a call waiting for it, and after each release every
# tenant asks once; exactly one is admitted.


def _turns(
    budget: ModelBudget, m: str, limit: ModelLimit, tenants: list[str], rounds: int
) -> list[str]:
    """Who gets the slot in each of ``rounds`` turns while every tenant of ``tenants`` has a
    call waiting; the tenants ask in a rotating order (whose turn it is must not depend on who
    asks first)."""
    calls = itertools.count()
    waiting = {t: f"{t}-{next(calls)}" for t in tenants}
    for tenant, token in waiting.items():  # the slot is held: each is told to wait
        answer = budget.admit(m, limit, token, 0, tenant=tenant)
        assert not answer.admitted and answer.reason == "concurrency"
    holder, order = "holder", []
    for turn in range(rounds):
        budget.settle(m, limit, holder, 0)
        admitted = []
        for tenant in tenants[turn % len(tenants) :] + tenants[: turn % len(tenants)]:
            answer = budget.admit(m, limit, waiting[tenant], 0, tenant=tenant)
            if answer.admitted:
                admitted.append(tenant)
            else:
                assert answer.reason in ("share", "concurrency")
                assert 0 < answer.wait_s <= 0.1
        assert len(admitted) == 1, f"turn {turn}: {admitted} admitted for one free slot"
        winner = admitted[0]
        order.append(winner)
        holder, waiting[winner] = waiting[winner], f"{winner}-{next(calls)}"
        assert not budget.admit(m, limit, waiting[winner], 0, tenant=winner).admitted
    return order


def _hold(budget: ModelBudget, m: str, limit: ModelLimit, tenant: str, calls: int) -> None:
    """``tenant`` alone makes ``calls`` calls one after the other, leaving the last one holding
    the slot under the token ``holder``."""
    for n in range(calls):
        token = "holder" if n == calls - 1 else f"alone-{n}"
        answer = budget.admit(m, limit, token, 0, tenant=tenant)
        assert answer.admitted, f"a tenant alone was refused ({answer.reason})"
        if token != "holder":
            budget.settle(m, limit, token, 0)


@pytest.mark.parametrize(("weights", "share_of_a"), [({}, 0.5), ({"team-a": 3}, 0.75)])
def test_waiting_tenants_take_turns_in_proportion_to_their_weights(
    budgets: Factory, weights: dict[str, float], share_of_a: float
) -> None:
    budget, m = budgets(), model()
    limit = ModelLimit(concurrent_requests=1, idle_credit_s=0, tenant_weights=weights)
    _hold(budget, m, limit, "team-a", 5)  # A's burst began first
    order = _turns(budget, m, limit, ["team-a", "team-b"], 40)
    assert abs(order.count("team-a") - share_of_a * 40) <= 1, order
    # fair at every point, not only on the whole: no stretch of 8 turns strays from the share
    for start in range(0, 33):
        assert abs(order[start : start + 8].count("team-a") - share_of_a * 8) <= 1.5, order


def test_a_tenant_alone_uses_the_whole_limit_and_others_waiting_elsewhere_do_not_count(
    budgets: Factory,
) -> None:
    budget, m = budgets(), model()
    limit = ModelLimit(concurrent_requests=1, idle_credit_s=0)
    other = model()  # team-b waits for another model: it takes no turn of this one
    assert budget.admit(other, limit, "b-holds", 0, tenant="team-b").admitted
    assert not budget.admit(other, limit, "b-waits", 0, tenant="team-b").admitted
    _hold(budget, m, limit, "team-a", 1)
    assert _turns(budget, m, limit, ["team-a"], 20) == ["team-a"] * 20


def test_a_tenant_back_from_idle_goes_first_within_its_credit(budgets: Factory) -> None:
    budget, m = budgets(), model()
    # with only a concurrency limit every call costs 1 s of virtual time: a 2 s credit is 2 calls
    limit = ModelLimit(concurrent_requests=1, idle_credit_s=2)
    _hold(budget, m, limit, "team-a", 10)  # A alone: B banks nothing for the turns it missed
    order = _turns(budget, m, limit, ["team-a", "team-b"], 12)
    # B starts its credit behind A: its 2 calls, and the one A is ahead by, then turns
    assert order[:3] == ["team-b"] * 3, order
    assert order.count("team-b") in (7, 8), order
    # without the credit, B waits its turn at once
    strict, m2 = ModelLimit(concurrent_requests=1, idle_credit_s=0), model()
    _hold(budget, m2, strict, "team-a", 10)
    order = _turns(budget, m2, strict, ["team-a", "team-b"], 12)
    assert order[:1] == ["team-b"] and order.count("team-b") in (6, 7), order


def test_a_waiting_call_that_stops_asking_holds_nobody_back_past_its_grace(
    budgets: Factory,
) -> None:
    budget, m = budgets(wait_grace_s=1.0), model()
    limit = ModelLimit(concurrent_requests=1, idle_credit_s=0)
    _hold(budget, m, limit, "team-a", 3)
    assert not budget.admit(m, limit, "b-gone", 0, tenant="team-b").admitted  # then it vanishes
    budget.settle(m, limit, "holder", 0)
    refused = budget.admit(m, limit, "a-next", 0, tenant="team-a")
    assert not refused.admitted and refused.reason == "share"  # B's turn: it may come back
    time.sleep(1.0 + 0.02 + 0.2)  # its grace after the poll it was told to make
    assert budget.admit(m, limit, "a-next", 0, tenant="team-a").admitted


def test_weights_are_checked_at_start() -> None:
    limits = ModelLimits.parse('{"m": {"requests_per_minute": 60, "tenant_weights": {"a": 2}}}')
    assert limits.root["m"].weight("a") == 2 and limits.root["m"].weight("b") == 1
    for bad, says in [
        ('{"m": {"tenant_weights": {"a": 0}}}', "weight from 0.001 to 1000"),
        ('{"m": {"tenant_weights": {"a b": 1}}}', "tenant 'a b' is not allowed"),
        ('{"m": {"idle_credit_s": -1}}', "m.idle_credit_s"),
    ]:
        with pytest.raises(ConfigurationError, match="TETHER_MODEL_LIMITS") as caught:
            ModelLimits.parse(bad)
        assert says in str(caught.value) and "\n" not in str(caught.value)


def test_the_gate_takes_its_calls_from_the_run_tenants_share() -> None:
    """The worker names the run's tenant (``budget_tenant``): a call of team-a waits while
    team-b, which A is ahead of, has a call waiting; it goes once B's call stops asking."""
    budget = InMemoryModelBudget(wait_grace_s=0.1)
    limits = ModelLimits.parse('{"m": {"concurrent_requests": 1, "idle_credit_s": 0}}')
    limit = limits.root["m"]
    assert budget.admit("m", limit, "a-earlier", 0, tenant="team-a").admitted
    assert not budget.admit("m", limit, "b-waits", 0, tenant="team-b").admitted
    budget.settle("m", limit, "a-earlier", 0)
    heard: list[str | None] = []
    listening, sharing = budget_waits.set(heard.append), budget_tenant.set("team-a")
    try:
        gated = BudgetedModel(ScriptedModel([ModelResponse.final("ok")]), budget, limits)
        assert gated.complete(ModelRequest(model="m", items=())).text == "ok"
    finally:
        budget_tenant.reset(sharing)
        budget_waits.reset(listening)
    assert heard[0] == "share" and heard[-1] is None, heard


def test_a_tenant_behind_with_a_call_waiting_leaves_free_workers_to_the_others(
    budgets: Factory,
) -> None:
    """What a worker asks before it starts one more run of a tenant on a limited model: leave
    the worker to another tenant's run while that tenant is owed the next turn (waiting, or
    admitted moments ago) and this one already has a call waiting to take its own."""
    budget, m = budgets(), model()
    # a 2 s credit: B, new, starts 2 calls behind A's latest start, 3 behind A's next
    limit = ModelLimit(concurrent_requests=1, idle_credit_s=2)
    _hold(budget, m, limit, "team-a", 3)
    assert not budget.leaves_to_others(m, limit, "team-a")  # alone: every worker is A's to use
    assert not budget.admit(m, limit, "a-waits", 0, tenant="team-a").admitted
    assert not budget.leaves_to_others(m, limit, "team-a")  # still nobody else
    assert not budget.admit(m, limit, "b-waits", 0, tenant="team-b").admitted
    assert budget.leaves_to_others(m, limit, "team-a")  # B goes first, A has a call in line
    assert not budget.leaves_to_others(m, limit, "team-b")  # B is owed: it never leaves
    budget.settle(m, limit, "holder", 0)
    assert budget.admit(m, limit, "b-waits", 0, tenant="team-b").admitted
    # B has nothing waiting now, but was admitted a moment ago and is still owed: its next run
    # is on its way to a worker
    assert budget.leaves_to_others(m, limit, "team-a")
    for n in range(2):  # B takes the rest of the turns it is owed
        budget.settle(m, limit, f"b-{n}" if n else "b-waits", 0)
        assert budget.admit(m, limit, f"b-{n + 1}", 0, tenant="team-b").admitted
    assert not budget.leaves_to_others(m, limit, "team-a")  # even: A's runs start
    # a tenant owed a turn but with no call waiting of its own starts its run
    fresh = model()
    _hold(budget, fresh, limit, "team-a", 3)
    assert not budget.admit(fresh, limit, "b2-waits", 0, tenant="team-b").admitted
    assert not budget.leaves_to_others(fresh, limit, "team-a")
