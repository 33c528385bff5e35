"""Contract of :class:`tether.runs.limits.base.ModelBudget`: memory, a redis-server and a 3-master
cluster pass the same tests; on Redis two budgets (two workers) share one model's limits.

Timing assertions here are bounds a slow machine cannot break: an admission never comes sooner
than the limit allows, and a refusal says how long to wait.
"""

from __future__ import annotations

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
from tether.runs.limits.gate import BudgetedModel, budget_waits
from tether.runs.limits.memory import InMemoryModelBudget
from tether.runs.limits.redis import RedisModelBudget
from tether.settings.limits import ModelLimit, ModelLimits

Factory = Callable[[], ModelBudget]


@pytest.fixture(params=["memory", "redis", "cluster"])
def budgets(request: pytest.FixtureRequest) -> Iterator[Factory]:
    """Makes budgets that share state (one process, or one Redis namespace)."""
    if request.param == "memory":
        shared = InMemoryModelBudget(slot_ttl_s=0.3)
        yield lambda: shared
        return
    url = request.getfixturevalue("cluster_url" if request.param == "cluster" else "redis_url")
    keys = RedisKeys(f"budget-{uuid.uuid4().hex[:8]}")
    clients = []

    def make() -> ModelBudget:
        client = redis_from_url(url)
        clients.append(client)
        return RedisModelBudget(client, keys, slot_ttl_ms=300)

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
