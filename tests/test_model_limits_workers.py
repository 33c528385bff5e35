"""Fleet-wide model limits on real worker processes: two workers share one model's concurrency
limit (its calls never overlap across processes), a run waiting for the budget shows "waiting
for model budget" and keeps its lease, and every run completes once."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.budget_agents import MODEL
from tests.support.stack import Stack
from tether.dev.workers import WorkerFleet
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.producer import Producer
from tether.runs.queue.redis import RedisRunQueue

QUEUE = "budgetq"
RUNS = 4


@pytest.fixture(scope="module")
def limited(
    stack: Stack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Producer, Path]]:
    tmp = tmp_path_factory.mktemp("budget")
    log = tmp / "calls.log"
    env = dict(
        stack.env,
        TETHER_AGENT_MODULES="tests.support.budget_agents",
        TETHER_QUEUE=QUEUE,
        TETHER_MODEL_LIMITS=json.dumps({MODEL: {"concurrent_requests": 1}}),
        BUDGET_TEST_CALL_LOG=str(log),
    )
    producer = Producer(stack.settings.model_copy(update={"queue": QUEUE}))
    fleet = WorkerFleet(env, tmp, count=2, queue=QUEUE, prefix="budget")
    fleet.start()
    try:
        yield producer, log
    finally:
        fleet.stop()
        producer.close()


def test_two_workers_share_one_concurrency_slot_and_show_the_wait(
    limited: tuple[Producer, Path], stack: Stack
) -> None:
    producer, log = limited
    handles = [producer.run_async(f"budget-{n}", "go", agent="slowcall") for n in range(RUNS)]
    runs = RedisRunQueue(
        redis_from_url(stack.settings.effective_redis_url),
        RedisKeys(stack.settings.namespace),
        result_ttl_s=3600,
    )
    seen_waiting: set[str] = set()
    deadline = time.monotonic() + 60
    while not all(h.done() for h in handles) and time.monotonic() < deadline:
        for ref, what in runs.waiting_runs():
            assert what == "model budget"
            view = runs.get(ref)
            assert view is not None and view.waiting in ("model budget", None)  # it may just end
            seen_waiting.add(ref.run_id)
        time.sleep(0.05)
    results = [h.result(timeout=30) for h in handles]
    assert [r.status for r in results] == ["COMPLETED"] * RUNS
    assert all(r.output == "called" and r.attempts == 1 for r in results)  # lease kept
    calls = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    assert len(calls) == RUNS
    for (_, end), (start, _) in itertools.pairwise(calls):
        assert start >= end - 0.01, f"two calls overlapped across workers: {calls}"
    assert seen_waiting, "no run was ever shown waiting for the model budget"
    assert runs.waiting_runs() == []  # nothing left marked waiting
