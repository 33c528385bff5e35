"""Concurrent runs of one tenant under ``tokens_per_day`` on real worker processes: the day goes
over its budget by at most one step of each running run (docs/usage-and-cost.md, Budgets).

One worker with three slots runs three runs at once; every model call reports 1,100 tokens and
takes a while, and the runs' first calls wait for each other (a barrier in the agent), so the
runs provably overlap.
Before each run published its usage at step boundaries, a run saw only the finished runs and
its own usage: each of the three made three calls and the day ended at 9,900 tokens, against a
budget of 2,500 and a documented bound of 2,500 + 3 * 1,100 = 5,800. No timing is asserted:
the bound holds however the steps interleave."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.overlap_spend_agents import BARRIER_S
from tests.support.spend_agents import CALL, PRICES
from tests.support.stack import Stack, unique
from tether.core.events import Usage
from tether.dev.workers import WorkerFleet
from tether.errors import BudgetExceeded
from tether.producer.client import Producer

QUEUE = "overlapq"
RUNS = 3
#: The tenant's tokens per day: one run alone stops after its third call (3,300 tokens).
CAP_TOKENS = 2500
STEP_TOKENS = CALL.input_tokens + CALL.output_tokens  # one step is one model call


@dataclass
class Overlap:
    producer: Producer
    barrier: Path
    tenant: str


@pytest.fixture(scope="module")
def overlap(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Overlap]:
    log_dir = tmp_path_factory.mktemp("overlap")
    barrier = tmp_path_factory.mktemp("barrier")
    namespace = f"ov-{uuid.uuid4().hex[:8]}"
    tenant = f"cap-{uuid.uuid4().hex[:6]}"
    env = dict(
        stack.env,
        TETHER_NAMESPACE=namespace,
        TETHER_QUEUE=QUEUE,
        TETHER_AGENT_MODULES="tests.support.overlap_spend_agents",
        TETHER_MODEL_PRICES=json.dumps(PRICES),
        TETHER_TENANT_BUDGETS=json.dumps({tenant: {"tokens_per_day": CAP_TOKENS}}),
        OVERLAP_BARRIER_DIR=str(barrier),
        OVERLAP_BARRIER_RUNS=str(RUNS),
    )
    settings = stack.settings.model_copy(
        update={
            "namespace": namespace,
            "queue": QUEUE,
            "model_prices": env["TETHER_MODEL_PRICES"],
            "tenant_budgets": env["TETHER_TENANT_BUDGETS"],
        }
    )
    # one worker with a slot per run: the runs overlap as on three workers, one start-up
    fleet = WorkerFleet(env, log_dir, count=1, concurrency=RUNS, queue=QUEUE, prefix="ov")
    producer = Producer(settings)
    fleet.start()
    try:
        yield Overlap(producer, barrier, tenant)
    finally:
        fleet.stop()
        producer.close()


def test_concurrent_runs_overshoot_the_tenants_day_by_at_most_one_step_each(
    overlap: Overlap,
) -> None:
    producer, tenant = overlap.producer, overlap.tenant
    handles = [
        producer.run_async(unique(), "steps=10", agent="slowspender", tenant=tenant)
        for _ in range(RUNS)
    ]
    stopped = 0
    for handle in handles:  # 11 calls each, far over the budget: every run is stopped by it
        with pytest.raises(BudgetExceeded, match=f"tenant '{tenant}'.*tokens_per_day=2500"):
            handle.result(timeout=BARRIER_S + 60)
        stopped += 1
    outcomes = sorted(p.name[:4] for p in overlap.barrier.iterdir() if p.name[:4] != "arri")
    assert outcomes == ["met-"] * RUNS, "the runs' first calls did not all overlap"
    day = producer.runs.tenant_usage.day(tenant)
    assert (day.runs, stopped) == (RUNS, RUNS)
    bound = CAP_TOKENS + RUNS * STEP_TOKENS
    assert CAP_TOKENS <= day.tokens <= bound, (
        f"the tenant's day is {day.tokens} tokens: over the budget {CAP_TOKENS} by more than "
        f"one step ({STEP_TOKENS}) of each of its {RUNS} running runs ({bound})"
    )
    # each finish moved its run from the in-flight record into the day: nothing left in flight
    assert producer.runs.tenant_usage.in_flight(tenant, None, Usage(), None) == day
