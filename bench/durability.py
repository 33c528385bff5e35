"""P7: what step durability costs, and P8: how fast a killed run resumes elsewhere.

P7 runs the same 10-step agent (``steps10``: ten tool steps, then an answer) with
``durability="step"`` (a checkpoint at every step boundary) and ``durability="run"`` (one commit
at the end), interleaved, and compares the medians. P8 kills the worker that runs a slow 10-step
run after its fourth step and measures, with default settings, the time until the resumed run's
next step starts on another worker (its ``STEP_START`` reaching the live stream).
"""

from __future__ import annotations

import time
from typing import cast

from bench.agents import STEPS10_ANSWER
from bench.core import Bench, BenchFailure, Measure, Stats, Target, check_result, ms
from bench.stack import pool_children
from tether.core.events import EventType
from tether.runs.queue.record import RunField

RESULT_TIMEOUT_S = 120.0


def _timed(bench: Bench, session_id: str, durability: str) -> float:
    start = time.perf_counter()
    result = bench.producer.run(
        session_id, "go", agent="steps10", durability=durability, wait_s=RESULT_TIMEOUT_S
    )
    elapsed = time.perf_counter() - start
    check_result(result, STEPS10_ANSWER)
    return elapsed


def p7_step_durability(bench: Bench) -> Measure:
    """A 10-step run with step checkpoints vs the same run committed once (interleaved)."""
    sz = bench.sizes
    step: list[float] = []
    run: list[float] = []
    for i in range(sz.p7_warmup + sz.p7_runs):
        sid_step, sid_run = bench.sid("p7s", i % 5), bench.sid("p7r", i % 5)
        if i % 2 == 0:
            s, r = _timed(bench, sid_step, "step"), _timed(bench, sid_run, "run")
        else:
            r, s = _timed(bench, sid_run, "run"), _timed(bench, sid_step, "step")
        if i >= sz.p7_warmup:
            step.append(ms(s))
            run.append(ms(r))
    ss, rs = Stats.of(step), Stats.of(run)
    return Measure(
        id="P7",
        name='10-step run, durability="step" vs "run"',
        unit="ms",
        tether=ss,
        baseline=rs,
        baseline_name='the same run with durability="run" (one commit at the end)',
        value=ss.median / rs.median,
        value_of="median step / median run",
        target=Target("<=", 1.3),
        note=(
            f"{sz.p7_runs} runs each (after {sz.p7_warmup} warm-up), interleaved, 5 sessions "
            f"round robin; p95 ratio {ss.p95 / rs.p95:.2f}x"
        ),
        extra={"p95_ratio": ss.p95 / rs.p95},
    )


def p8_resume_after_kill(bench: Bench) -> Measure:
    """SIGKILL the worker running a slow 10-step run after step 4; time to the next step."""
    sz = bench.sizes
    if len(bench.stack.tether.workers) < 2:  # someone must be left to resume the run
        bench.stack.start_tether_worker("p8-spare", bench.stack.settings.queue)
    gaps: list[float] = []
    for i in range(sz.p8_kills):
        gaps.append(_kill_and_resume(bench, bench.sid("p8", i)))
    stats = Stats.of(gaps)
    return Measure(
        id="P8",
        name="SIGKILL to the resumed step starting on another worker",
        unit="s",
        tether=stats,
        baseline=None,
        baseline_name="",
        value=stats.p95,
        value_of="p95",
        target=Target("<=", 10.0, "s"),
        value_unit="s",
        note=(
            f"{sz.p8_kills} kills, default settings (lease TTL "
            f"{bench.stack.settings.lease_ttl_ms} ms, sweep every "
            f"{bench.stack.settings.sweep_interval_ms} ms); each killed worker is restarted"
        ),
    )


def _kill_and_resume(bench: Bench, session_id: str) -> float:
    handle = bench.producer.run_async(session_id, "go slowly", agent="steps10-slow")
    for event in handle.events(idle_timeout_s=RESULT_TIMEOUT_S):
        if event.type is EventType.STEP_END and event.step == 3:
            break
    victim = _holder(bench, handle.run_id)
    lease = cast(bytes, bench.producer.redis.get(bench.producer.keys.lease("default", session_id)))
    old_fence = int((lease or b"|0").decode().rsplit("|", 1)[1])
    victim.kill()
    killed = time.monotonic()
    resumed = _wait_step_start(bench, session_id, old_fence, killed) - killed
    check_result(handle.run_result(timeout=RESULT_TIMEOUT_S), STEPS10_ANSWER)
    victim.start()
    return resumed


def _wait_step_start(bench: Bench, session_id: str, old_fence: int, since: float) -> float:
    """When a ``STEP_START`` written under a newer fence (the resumed attempt) appeared."""
    key = bench.producer.keys.events("default", session_id)
    while time.monotonic() - since < RESULT_TIMEOUT_S:
        entries = cast(
            list[tuple[bytes, dict[bytes, bytes]]], bench.producer.redis.xrevrange(key, count=20)
        )
        for _id, fields in entries:
            if int(fields[b"fence"]) > old_fence and b'"STEP_START"' in fields[b"event"]:
                return time.monotonic()
        time.sleep(0.02)
    raise BenchFailure(f"session {session_id} never resumed after the kill")


def _holder(bench: Bench, run_id: str):  # type: ignore[no-untyped-def]
    ref = bench.producer.locate(run_id)
    raw = bench.producer.redis.hget(bench.producer.keys.run(*ref), RunField.WORKER) if ref else None
    text = raw.decode() if isinstance(raw, bytes) else str(raw or "")
    pid = int(text.split(":")[1]) if text.count(":") >= 1 else -1
    for worker in [*bench.stack.tether.workers, *bench.stack.extra_workers]:
        if worker.pid is not None and pid in pool_children(worker.pid):
            return worker
    raise BenchFailure(f"no Tether worker runs {run_id} (worker field {raw!r})")
