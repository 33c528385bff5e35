"""Multitask strategies on real workers: a second run races a running 10-step run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.durable_agents import STEPS, RedisCounter, counter_env
from tests.support.stack import Stack, eventually, unique
from tether.core.items import ToolOutput, UserMessage
from tether.core.results import RunStatus
from tether.dev.workers import WorkerFleet
from tether.producer import Producer

QUEUE = "multiq"


@pytest.mark.parametrize(
    ("policy", "first_status", "inputs", "outputs"),
    [
        ("enqueue", RunStatus.COMPLETED, 2, STEPS),
        # the in-process suite (tests/test_multitask.py) covers these two on every backend;
        # on real workers they run in `make test-long`
        pytest.param("interrupt", RunStatus.INTERRUPTED, 2, STEPS, marks=pytest.mark.slow),
        pytest.param("rollback", RunStatus.CANCELLED, 1, STEPS, marks=pytest.mark.slow),
    ],
)
def test_a_second_run_races_a_running_one(
    live_stack: Stack,
    tmp_path: Path,
    policy: str,
    first_status: RunStatus,
    inputs: int,
    outputs: int,
) -> None:
    prefix = unique("counter")
    counter = RedisCounter(live_stack.redis.url, prefix)
    env = counter_env(live_stack.env, live_stack.redis.url, prefix, QUEUE)
    sid = unique(f"race-{policy}")
    fleet = WorkerFleet(env, tmp_path, count=2, queue=QUEUE, prefix="multi")
    try:
        fleet.start()
        with Producer(live_stack.settings.model_copy(update={"queue": QUEUE})) as producer:
            first = producer.run_async(sid, "count to ten", agent="counter-slow")
            eventually(lambda: counter.read("total") >= 3, timeout_s=60)
            second = producer.run_async(sid, "count again", agent="counter-slow", on_busy=policy)
            first_result = first.run_result(timeout=90)
            second_result = second.run_result(timeout=90)
    finally:
        fleet.stop()
    assert first_result.status is first_status
    assert second_result.status is RunStatus.COMPLETED
    reader = live_stack.reader()
    report = reader.verify(sid)
    assert report.ok, report.problems
    head = reader.read(sid)
    assert head is not None
    items = head.memory.items
    assert sum(isinstance(i, UserMessage) for i in items) == inputs
    assert sum(isinstance(i, ToolOutput) for i in items) == outputs
