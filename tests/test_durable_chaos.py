"""Durable runs under chaos: multi-step runs over many sessions while workers are SIGKILLed and
SIGTERMed at random. Every run completes once, every side effect happens once, no call whose
result was recorded runs again, and every session verifies (gapless history, fold == state).

The CI-sized variant runs in `make test`; the issue's size (100 runs over 20 sessions, 20
SIGKILLs, 5 SIGTERMs) in `make test-long`.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.durable_agents import counter_env
from tests.support.stack import Stack, unique
from tether.core.events import EventType
from tether.core.results import RunStatus
from tether.dev.workers import WorkerFleet, WorkerProcess
from tether.producer import Producer
from tether.producer.handle import RunHandle

QUEUE = "chaosq"


@dataclass
class Faults:
    kills: int = 0
    terms: int = 0


def _disrupt(
    workers: list[WorkerProcess],
    kills: int,
    terms: int,
    stop: threading.Event,
    faults: Faults,
    seed: int,
) -> None:
    """SIGKILL (whole group) or SIGTERM (main process: a warm shutdown) one worker at a time,
    restarting it, until the planned faults are done."""
    rng = random.Random(seed)
    plan = ["kill"] * kills + ["term"] * terms
    rng.shuffle(plan)
    for fault in plan:
        if stop.wait(rng.uniform(0.3, 0.9)):
            return
        victim = rng.choice([w for w in workers if w.alive()] or workers)
        if not victim.alive() or victim.proc is None:
            continue
        if fault == "kill":
            victim.kill()
            faults.kills += 1
        else:
            os.kill(victim.proc.pid, signal.SIGTERM)
            victim.proc.wait(timeout=60)
            faults.terms += 1
        victim.start()


def _check_chaos(
    stack: Stack, tmp_path: Path, *, sessions: int, runs_each: int, kills: int, terms: int
) -> None:
    prefix = unique("chaos")
    env = counter_env(stack.env, stack.redis.url, prefix, QUEUE, "tests.support.steps_agents")
    sids = [unique(f"c{n}") for n in range(sessions)]
    fleet = WorkerFleet(env, tmp_path, count=3, queue=QUEUE, prefix="chaos-steps")
    faults, stop = Faults(), threading.Event()
    handles: list[tuple[str, RunHandle]] = []
    try:
        fleet.start()
        disruptor = threading.Thread(
            target=_disrupt, args=(fleet.workers, kills, terms, stop, faults, 7), daemon=True
        )
        with Producer(stack.settings.model_copy(update={"queue": QUEUE})) as producer:
            disruptor.start()
            for r in range(runs_each):
                for sid in sids:
                    handles.append((sid, producer.run_async(sid, f"run {r}", agent="steps4")))
            results = [(sid, h.run_result(timeout=300)) for sid, h in handles]
            disruptor.join(timeout=300)
    finally:
        stop.set()
        fleet.stop()
    assert (faults.kills, faults.terms) == (kills, terms), "the faults did not all happen"
    assert all(r.status is RunStatus.COMPLETED for _, r in results), [
        (r.run_id, r.status, r.error_type) for _, r in results if r.status != RunStatus.COMPLETED
    ]
    client = stack.redis.client()
    executions = {k.decode(): int(v) for k, v in client.hgetall(f"{prefix}:exec").items()}
    effects = {k.decode() for k in client.smembers(f"{prefix}:effects")}
    model_calls = int(client.get(f"{prefix}:model_calls") or 0)
    reader = stack.reader()
    committed_calls = 0
    for sid in sids:
        report = reader.verify(sid)
        assert report.ok, (sid, report.problems)
        head = reader.read(sid)
        assert head is not None
        mine = [h.request_id for s, h in handles if s == sid]
        assert sorted(r.request_id for r in head.applied) == sorted(mine)  # each exactly once
        history = reader.events(sid)
        committed_calls += sum(e.type is EventType.TOOL_RESULT for e in history)
    runs = sessions * runs_each
    assert committed_calls == runs * 4
    assert len(effects) == committed_calls  # every effect once, and only for committed calls
    repeated = [k for k, n in executions.items() if n > 1]
    # only a call in flight when its worker died can run again (same key, deduplicated), or a
    # step's last call whose result waited for the next model request's append; a call whose
    # result was written never does, and a warm shutdown interrupts no call
    assert len(repeated) <= faults.kills, (len(repeated), faults.kills)
    assert all(n <= 2 for n in executions.values())
    assert model_calls <= runs * 5 + faults.kills  # at most one model call redone per kill
    print(
        f"\nchaos: {runs} runs, {faults.kills} SIGKILLs, {faults.terms} SIGTERMs, "
        f"{committed_calls} tool calls committed, {len(repeated)} re-executed (in flight at a "
        f"kill), {model_calls - runs * 5} model calls redone"
    )


@pytest.mark.slow  # a long variant: `make test-long` (keeps `make test` under 10 min)
def test_durable_chaos_ci_sized(live_stack: Stack, tmp_path: Path) -> None:
    _check_chaos(live_stack, tmp_path, sessions=8, runs_each=3, kills=4, terms=2)


@pytest.mark.slow
def test_durable_chaos_issue_sized(live_stack: Stack, tmp_path: Path) -> None:
    _check_chaos(live_stack, tmp_path, sessions=20, runs_each=5, kills=20, terms=5)
