"""Tenants' fair share of a fleet-wide model limit on real worker processes: team-a's backlog
holds the model (one call at a time, ten runs queued) when team-b's runs arrive; once a run of
team-b waits for the model, it takes the next turn instead of queueing behind A's backlog.

Each tenant submits to a queue of its own, and the workers consume both (a worker takes from its
queues in turn): the fair share decides whose waiting call the model admits, the queues decide
whose run gets a free worker (docs/limits.md, "Fair shares between tenants"). The assertions are
on the order of the calls, never on how long anything took.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.budget_agents import SHARED_MODEL
from tests.support.stack import Stack
from tether.dev.workers import WorkerFleet
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.producer import Producer
from tether.producer.handle import RunHandle
from tether.runs.contract import RunRef
from tether.runs.queue.redis import RedisRunQueue

QUEUE_A, QUEUE_B = "sharea", "shareb"
A_RUNS, B_RUNS = 10, 2


@pytest.fixture(scope="module")
def fleet(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("shares")
    log = tmp / "calls.log"
    env = dict(
        stack.env,
        TETHER_AGENT_MODULES="tests.support.budget_agents",
        TETHER_QUEUE=QUEUE_A,
        TETHER_MODEL_LIMITS=json.dumps({SHARED_MODEL: {"concurrent_requests": 1}}),
        BUDGET_TEST_CALL_LOG=str(log),
    )
    workers = WorkerFleet(env, tmp, count=4, queue=f"{QUEUE_A},{QUEUE_B}", prefix="shares")
    workers.start()
    try:
        yield log
    finally:
        workers.stop()


def _producer(stack: Stack, tenant: str, queue: str) -> Producer:
    return Producer(stack.settings.model_copy(update={"tenant": tenant, "queue": queue}))


def _first_waiting(runs: RedisRunQueue, refs: list[RunRef], a: list[RunHandle]) -> float:
    """When a run of ``refs`` was first seen waiting for the model (wall clock)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for ref in refs:
            view = runs.get(ref)
            if view is not None and view.waiting == "model budget":
                return time.time()
        assert not all(h.done() for h in a), "team-a's backlog ended before team-b waited"
        time.sleep(0.02)
    raise AssertionError("no run of team-b was ever shown waiting for the model")


def test_a_tenant_arriving_behind_a_burst_takes_the_next_turn(fleet: Path, stack: Stack) -> None:
    producer_a = _producer(stack, "team-a", QUEUE_A)
    producer_b = _producer(stack, "team-b", QUEUE_B)
    runs = RedisRunQueue(
        redis_from_url(stack.settings.effective_redis_url),
        RedisKeys(stack.settings.namespace),
        result_ttl_s=3600,
    )
    try:
        a = [producer_a.run_async(f"share-a-{n}", "go", agent="sharecall-a") for n in range(A_RUNS)]
        a_refs = [RunRef("team-a", f"share-a-{n}", h.run_id) for n, h in enumerate(a)]
        _first_waiting(runs, a_refs, a)  # A's backlog holds the model: its runs queue for it
        b = [producer_b.run_async(f"share-b-{n}", "go", agent="sharecall-b") for n in range(B_RUNS)]
        b_refs = [RunRef("team-b", f"share-b-{n}", h.run_id) for n, h in enumerate(b)]
        seen_waiting = _first_waiting(runs, b_refs, a)
        results = [h.result(timeout=120) for h in a + b]
    finally:
        producer_a.close()
        producer_b.close()
    assert [r.status for r in results] == ["COMPLETED"] * (A_RUNS + B_RUNS)
    calls = sorted((float(start), label) for label, start, _ in map(str.split, _lines(fleet)))
    assert len(calls) == A_RUNS + B_RUNS
    order = [label for _, label in calls]
    # once B waits, its call is the next the model admits: only a call admitted before (in
    # flight, its start logged a moment later) may come first
    after = [label for start, label in calls if start >= seen_waiting]
    assert "b" in after[:2], f"team-b waited behind team-a's backlog: {order}"
    # and B is done while A's backlog is still pending
    assert order[-3:] == ["a"] * 3, f"team-b's runs did not pass team-a's backlog: {order}"


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines()
