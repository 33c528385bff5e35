"""Step durability on real worker processes, redis-server and S3 over HTTP.

The issue's acceptance scenario: a 10-step run whose tool increments a counter outside Tether (a
Redis key), deduplicating by its idempotency key. The worker is SIGKILLed inside step 7's tool
call, after 6 steps were checkpointed; the run completes on the other worker. The counter is 10,
the model was asked 11 times in all (not 17), and the session verifies (gapless, fold == state).
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from tests.support.durable_agents import STEPS, RedisCounter, counter_env
from tests.support.stack import Stack, eventually, unique
from tether.core.events import EventType
from tether.core.results import RunStatus
from tether.dev.workers import WorkerFleet, WorkerProcess
from tether.producer import Producer

QUEUE = "durableq"


def _holder(fleet: WorkerFleet, stack: Stack, run_id: str) -> WorkerProcess | None:
    ref = stack.producer.locate(run_id)
    if ref is None:
        return None
    raw = stack.redis.client().hget(stack.producer.keys.run(*ref), "worker")
    if raw is None:
        return None
    pid = int(raw.decode().split(":")[1])
    for worker in fleet.workers:
        if worker.proc is not None and _parent_of(pid) == worker.proc.pid:
            return worker
    return None


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except FileNotFoundError:
        return None


def test_sigkill_after_step_six_resumes_on_another_worker(
    live_stack: Stack, tmp_path: Path
) -> None:
    prefix = unique("counter")
    counter = RedisCounter(live_stack.redis.url, prefix)
    env = counter_env(live_stack.env, live_stack.redis.url, prefix, QUEUE)
    producer = Producer(live_stack.settings.model_copy(update={"queue": QUEUE}))
    fleet = WorkerFleet(env, tmp_path, count=2, queue=QUEUE, prefix="durable")
    sid = unique("durable")
    try:
        fleet.start()
        handle = producer.run_async(sid, "count to ten", agent="counter")
        eventually(lambda: counter.read("blocked") == 1, timeout_s=60)  # inside call 7
        victim = eventually(lambda: _holder(fleet, live_stack, handle.run_id), timeout_s=10)
        killed_at = time.monotonic()
        victim.kill()
        result = handle.result(timeout=90)
        print(f"\nkill -> completion: {time.monotonic() - killed_at:.2f} s")
    finally:
        fleet.stop()
        producer.close()
    assert result.status is RunStatus.COMPLETED
    assert result.output == f"counted {STEPS}"
    assert result.attempts == 2
    assert counter.read("total") == STEPS
    assert counter.read("model_calls") == STEPS + 1  # not 7 + 11
    reader = live_stack.reader()
    report = reader.verify(sid)
    assert report.ok, report.problems
    history = reader.events(sid)
    calls = [e for e in history if e.type is EventType.MODEL_REQUEST]
    assert len(calls) == STEPS + 1  # the committed history asks the model once per step


def test_warm_shutdown_hands_the_run_back_at_its_last_checkpoint(
    live_stack: Stack, tmp_path: Path
) -> None:
    """SIGTERM (a warm shutdown, as `docker stop` sends) to the worker running a 10-step run:
    the worker hands the run back at its next step boundary and exits without finishing it;
    the other worker resumes it. No step is redone: the model is asked 11 times in all."""
    prefix = unique("counter")
    counter = RedisCounter(live_stack.redis.url, prefix)
    env = counter_env(live_stack.env, live_stack.redis.url, prefix, QUEUE)
    producer = Producer(live_stack.settings.model_copy(update={"queue": QUEUE}))
    fleet = WorkerFleet(env, tmp_path, count=2, queue=QUEUE, prefix="handback")
    try:
        fleet.start()
        handle = producer.run_async(unique("handback"), "count to ten", agent="counter-slow")
        eventually(lambda: counter.read("total") >= 3, timeout_s=60)
        victim = eventually(lambda: _holder(fleet, live_stack, handle.run_id), timeout_s=10)
        assert victim.proc is not None
        os.kill(victim.proc.pid, signal.SIGTERM)  # the main process only, as `docker stop` does
        victim.proc.wait(timeout=30)
        result = handle.result(timeout=90)
    finally:
        fleet.stop()
        producer.close()
    # the other worker took it up where the victim left it (how long the victim's own exit
    # takes after the hand-back is Celery's business, so it is not what is measured)
    resumed = [
        int(m.group(1))
        for worker in fleet.workers
        if worker is not victim
        for m in re.finditer(r"resumed at step (\d+)", worker.log_text())
    ]
    assert resumed and resumed[0] < STEPS
    assert result.status is RunStatus.COMPLETED and result.output == f"counted {STEPS}"
    assert result.attempts == 1  # a hand-back is no failed attempt: the budget is untouched
    assert counter.read("total") == STEPS
    assert counter.read("model_calls") == STEPS + 1  # resumed, not redone
    assert "handed back at its last checkpoint" in victim.log_text()
