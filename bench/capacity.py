"""Throughput and resource measures: P2 (a burst), P5 (submit rate), P6 (worker memory).

P5 queues its runs without a consumer and P6 executes them on a fresh worker, so P6 runs P5
first when it is run alone. See :mod:`bench.measures` for how measures are run.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from celery import Celery
from celery.result import AsyncResult, ResultSet

from bench import baselines
from bench.core import (
    RESULT_TIMEOUT_S,
    Bench,
    BenchFailure,
    Measure,
    P5State,
    Stats,
    Target,
    check_result,
)
from bench.counting import count_in_logs, log_sizes
from bench.stack import pool_children, rss_kib
from tether.core.results import RunStatus
from tether.producer.client import Producer
from tether.producer.handle import RunHandle
from tether.producer.submission import RunSpec

#: Redis namespace of P5/P6: its own active set, so the fleet's sweepers never touch those runs.
P6_NAMESPACE = "bench-p6"
#: A queue nobody consumes: bare Celery's bulk submit goes there and is purged afterwards.
BULK_QUEUE = "bench-bulk"


# --- P2 ---------------------------------------------------------------------------------------


def _tether_batch(bench: Bench, prefix: str, runs: int, sessions: int) -> float:
    specs = [RunSpec(f"{prefix}-{i % sessions}", f"hello {i}", "echo") for i in range(runs)]
    start = time.perf_counter()
    handles = bench.producer.submit_many(specs)
    results = [h.result(timeout=RESULT_TIMEOUT_S * 5) for h in handles]
    elapsed = time.perf_counter() - start
    for spec, result in zip(specs, results, strict=True):
        check_result(result, f"echo: {spec.input}")
    return elapsed


def _baseline_batch(bench: Bench, prefix: str, runs: int, sessions: int) -> tuple[float, int]:
    """Time ``runs`` hand-written tasks; return (seconds, updates lost to races)."""
    start = time.perf_counter()
    with bench.baseline_app.producer_or_acquire() as publisher:
        results: list[AsyncResult] = [
            baselines.handwritten.apply_async(
                (f"{prefix}-{i % sessions}", f"hello {i}"), producer=publisher
            )
            for i in range(runs)
        ]
    ResultSet(results, app=bench.baseline_app).get(timeout=RESULT_TIMEOUT_S * 5)
    elapsed = time.perf_counter() - start
    stored = sum(bench.blob_messages(f"{prefix}-{s}") for s in range(sessions)) // 2
    return elapsed, runs - stored


def p2_throughput(bench: Bench) -> Measure:
    """Runs per second for a burst over many sessions, 2 worker processes on each side."""
    sz = bench.sizes
    tether: list[float] = []
    baseline: list[float] = []
    lost = 0
    offsets = log_sizes(bench)
    for trial in range(sz.p2_trials):
        # alternate who goes first: a drift in the machine's load then favours neither side
        baseline_first = trial % 2 == 1
        b_sid = bench.sid("p2b", trial)
        if baseline_first:
            b, lost_now = _baseline_batch(bench, b_sid, sz.p2_runs, sz.p2_sessions)
        t = _tether_batch(bench, bench.sid("p2t", trial), sz.p2_runs, sz.p2_sessions)
        if not baseline_first:
            b, lost_now = _baseline_batch(bench, b_sid, sz.p2_runs, sz.p2_sessions)
        tether.append(sz.p2_runs / t)
        baseline.append(sz.p2_runs / b)
        lost += lost_now
    kicks = count_in_logs(bench, offsets, "sweeper re-enqueued")
    drains = count_in_logs(bench, offsets, r"Task tether\.drain\[[^\]]+\] received")
    ts, bs = Stats.of(tether), Stats.of(baseline)
    return Measure(
        id="P2",
        name=f"throughput, {sz.p2_runs} runs over {sz.p2_sessions} sessions",
        unit="runs/s",
        tether=ts,
        baseline=bs,
        baseline_name="hand-written task, bulk apply_async + join",
        value=ts.median / bs.median,
        value_of="Tether runs/s / baseline runs/s",
        target=Target(">=", 0.8),
        note=(
            f"{len(bench.stack.tether.workers)} Tether and {len(bench.stack.baseline)} baseline "
            f"worker processes; {sz.p2_trials} trial(s), the side that goes first alternating; "
            "median runs/s of each side; submit until the last result is back; "
            f"hand-written task lost {lost} of {sz.p2_runs * sz.p2_trials} updates to races "
            f"(Tether: 0, every run committed once); Tether's sweepers re-enqueued {kicks} "
            f"sessions whose queued runs waited longer than a lease TTL ({drains} "
            "tether.drain tasks received)"
        ),
        extra={"baseline_lost_updates": lost, "sweeper_kicks": kicks, "drain_tasks": drains},
    )


# --- P5 / P6 ----------------------------------------------------------------------------------


def _purge(app: Celery, queue: str) -> None:
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(queue)


def p5_submit_rate(bench: Bench) -> Measure:
    """``submit_many`` of N requests vs bare Celery bulk ``apply_async`` of N no-op tasks.

    Nothing consumes either queue while they are submitted; Tether's runs are then executed by
    P6's fresh worker, the no-op tasks are purged.
    """
    sz = bench.sizes
    settings = bench.stack.settings.model_copy(update={"namespace": P6_NAMESPACE})
    producer = Producer(settings)
    app = bench.baseline_app
    noop = baselines.noop

    def specs(prefix: str, count: int, offset: int = 0) -> list[RunSpec]:
        return [
            RunSpec(bench.sid(prefix, (offset + i) % sz.p5_sessions), f"hello {i}", "echo")
            for i in range(count)
        ]

    def bulk(count: int) -> float:
        start = time.perf_counter()
        with app.producer_or_acquire() as publisher:
            for i in range(count):
                noop.apply_async((i,), queue=BULK_QUEUE, producer=publisher)
        return time.perf_counter() - start

    warm = producer.submit_many(specs("p6", sz.p5_warmup))
    bulk(sz.p5_warmup)
    batch = specs("p6", sz.p5_requests, sz.p5_warmup)
    start = time.perf_counter()
    handles = producer.submit_many(batch)
    tether_s = time.perf_counter() - start
    baseline_s = bulk(sz.p5_requests)
    _purge(app, BULK_QUEUE)
    t_rate, b_rate = sz.p5_requests / tether_s, sz.p5_requests / baseline_s
    measure = Measure(
        id="P5",
        name=f"submit rate, {sz.p5_requests} requests",
        unit="req/s",
        tether=Stats.of([t_rate]),
        baseline=Stats.of([b_rate]),
        baseline_name="bare Celery: bulk apply_async of a no-op task, one connection",
        value=t_rate / b_rate,
        value_of="Tether req/s / baseline req/s",
        target=Target(">=", 0.8),
        note=(
            f"one submit_many of {sz.p5_requests} RunSpecs over {sz.p5_sessions} sessions vs "
            f"{sz.p5_requests} apply_async on one producer; one timed pass each after "
            f"{sz.p5_warmup} warm-up; no consumer running"
        ),
        extra={"tether_s": tether_s, "baseline_s": baseline_s},
    )
    bench.p5_state = P5State(producer, [*warm, *handles], measure)
    return measure


def _only_pool_child(worker_pid: int) -> int:
    children = pool_children(worker_pid)
    if len(children) != 1:
        raise BenchFailure(f"P6 worker {worker_pid} has pool children {children}, want 1")
    return children[0]


def _wait_sampling_rss(
    bench: Bench, child: int, handles: list[RunHandle]
) -> tuple[dict[int, int], float]:
    """Wait until every run of ``handles`` finished, sampling the pool child's RSS after N1 and
    N2 runs and every 5% of N2; return (KiB by runs done, seconds taken)."""
    sz = bench.sizes
    lock = threading.Lock()
    done = [0]
    samples: dict[int, int] = {}
    every = max(1, sz.p6_total // 20)
    finished = threading.Event()

    def on_done(_handle: Any) -> None:
        # called on the listener thread, or on this one for a run that had already finished
        with lock:
            done[0] += 1
            count = done[0]
        if count == sz.p6_first or count == sz.p6_total or count % every == 0:
            samples[count] = rss_kib(child)
        if count >= len(handles):
            finished.set()

    start = time.perf_counter()
    for handle in handles:
        handle.add_done_callback(on_done)
    if not finished.wait(timeout=max(600.0, sz.p6_total * 0.2)):
        raise BenchFailure(f"P6: only {done[0]}/{len(handles)} runs finished")
    return samples, time.perf_counter() - start


def p6_worker_rss(bench: Bench) -> Measure:
    """RSS of a fresh worker's pool child after N1 and after N2 runs (P5's queued runs)."""
    sz = bench.sizes
    state = bench.p5_state
    if state is None:
        p5_submit_rate(bench)
        state = bench.p5_state
        assert state is not None
    env_extra = {"TETHER_NAMESPACE": P6_NAMESPACE}
    worker = bench.stack.start_tether_worker("p6", bench.stack.settings.queue, env_extra)
    assert worker.pid is not None
    child = _only_pool_child(worker.pid)
    boot_kib = rss_kib(child)
    samples, elapsed = _wait_sampling_rss(bench, child, state.handles)
    failed = [h.run_id for h in state.handles if h.run_result().status is not RunStatus.COMPLETED]
    if failed:
        raise BenchFailure(f"P6: {len(failed)} runs did not complete, e.g. {failed[:3]}")
    if pool_children(worker.pid) != [child]:
        raise BenchFailure("P6: the pool child was replaced during the measure")
    first, last = samples[sz.p6_first], samples[sz.p6_total]
    worker.stop()
    state.producer.close()
    return Measure(
        id="P6",
        name=f"worker RSS after {sz.p6_total} runs vs after {sz.p6_first}",
        unit="MiB",
        tether=Stats.of([last / 1024]),
        baseline=Stats.of([first / 1024]),
        baseline_name=f"the same pool child after {sz.p6_first} runs",
        value=last / first,
        value_of=f"VmRSS after {sz.p6_total} / after {sz.p6_first}",
        target=Target("<=", 1.1),
        note=(
            f"one fresh prefork worker (-c 1), VmRSS of its pool child from /proc; "
            f"{len(state.handles)} echo runs over {sz.p5_sessions} sessions queued by P5, "
            f"done in {elapsed:.0f} s ({len(state.handles) / elapsed:.0f} runs/s); "
            f"RSS at boot {boot_kib / 1024:.1f} MiB"
        ),
        extra={
            "boot_rss_mib": boot_kib / 1024,
            "runs_per_s_one_worker": len(state.handles) / elapsed,
        },
        series={
            "rss_runs": [float(k) for k in sorted(samples)],
            "rss_mib": [samples[k] / 1024 for k in sorted(samples)],
        },
    )
