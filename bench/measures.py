"""The measures P1..P6 (plus P4w, informational), each run against its baseline in one go.

Every measure starts from an empty bucket (moto is reset and the bucket re-created), so data an
earlier measure left in moto cannot change a later one. Session ids carry a per-run tag, so Redis
state never collides. See :mod:`bench.core` for how latencies are taken.
"""

from __future__ import annotations

import multiprocessing
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from celery import Celery
from celery.result import AsyncResult, ResultSet

from bench import baselines
from bench.core import (
    RESULT_TIMEOUT_S,
    TENANT,
    Bench,
    BenchFailure,
    Measure,
    P5State,
    Stats,
    Target,
    baseline_run,
    check_result,
    ms,
    ping_run,
    tether_run,
)
from bench.counting import count_in_logs, count_requests, log_sizes
from bench.stack import pool_children, rss_kib
from producer.client import Producer, RunSpec
from shared.events import AgentEvent, EventType, TextPayload
from shared.keys import RedisKeys
from shared.redis_conn import redis_from_url
from shared.results import RunStatus
from shared.streams.redis import RedisEventStream

#: Redis namespace of P5/P6: its own active set, so the fleet's sweepers never touch those runs.
P6_NAMESPACE = "bench-p6"
#: A queue nobody consumes: bare Celery's bulk submit goes there and is purged afterwards.
BULK_QUEUE = "bench-bulk"


# --- P1 ---------------------------------------------------------------------------------------


def p1_latency(bench: Bench) -> Measure:
    """End-to-end latency of a 1-step ``echo`` run vs the hand-written task (interleaved)."""
    sz = bench.sizes
    tether: list[float] = []
    baseline: list[float] = []
    bare: list[float] = []
    for i in range(sz.p1_warmup + sz.p1_runs):
        sid, text = bench.sid("p1", i % sz.p1_sessions), f"hello {i}"
        # alternate who goes first, so neither side always runs right after the other
        if i % 2 == 0:
            t = tether_run(bench, sid, text, "echo", f"echo: {text}")
            b = baseline_run(sid, text)
        else:
            b = baseline_run(sid, text)
            t = tether_run(bench, sid, text, "echo", f"echo: {text}")
        p = ping_run(i)
        if i >= sz.p1_warmup:
            tether.append(ms(t))
            baseline.append(ms(b))
            bare.append(ms(p))
    ts, bs, ps = Stats.of(tether), Stats.of(baseline), Stats.of(bare)
    count = max(10, sz.p1_runs // 4)
    t_ops = count_requests(
        bench,
        count,
        lambda i: tether_run(bench, bench.sid("p1", i % sz.p1_sessions), "x", "echo", "echo: x"),
    )
    b_ops = count_requests(
        bench, count, lambda i: baseline_run(bench.sid("p1", i % sz.p1_sessions), "x")
    )
    return Measure(
        id="P1",
        name="1-step echo run, end-to-end latency",
        unit="ms",
        tether=ts,
        baseline=bs,
        baseline_name="hand-written task, apply_async().get()",
        value=ts.median / bs.median,
        value_of="median Tether / median baseline",
        target=Target("<=", 1.25),
        note=(
            f"{sz.p1_runs} runs each (after {sz.p1_warmup} warm-up), interleaved, "
            f"{sz.p1_sessions} sessions round robin; p95 ratio {ts.p95 / bs.p95:.2f}x; "
            f"bare Celery round trip (no-op task, apply_async().get()): median "
            f"{ps.median:.1f} ms, p95 {ps.p95:.1f} ms"
        ),
        extra={
            "p95_ratio": ts.p95 / bs.p95,
            "bare_celery_median_ms": ps.median,
            "bare_celery_p95_ms": ps.p95,
            **{f"tether per run: {k}": v for k, v in t_ops.items()},
            **{f"hand-written per run: {k}": v for k, v in b_ops.items()},
        },
    )


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
        t = _tether_batch(bench, bench.sid("p2t", trial), sz.p2_runs, sz.p2_sessions)
        tether.append(sz.p2_runs / t)
        b, lost_now = _baseline_batch(bench, bench.sid("p2b", trial), sz.p2_runs, sz.p2_sessions)
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
            f"worker processes; {sz.p2_trials} trial(s); submit until the last result is back; "
            f"hand-written task lost {lost} of {sz.p2_runs * sz.p2_trials} updates to races "
            f"(Tether: 0, every run committed once); Tether's sweepers re-enqueued {kicks} "
            f"sessions whose queued runs waited longer than a lease TTL ({drains} "
            "tether.drain tasks received)"
        ),
        extra={"baseline_lost_updates": lost, "sweeper_kicks": kicks, "drain_tasks": drains},
    )


# --- P3 ---------------------------------------------------------------------------------------


def p3_long_session(bench: Bench) -> Measure:
    """Latency of run #late vs run #early of one long ``notes-compact`` session.

    The headline compares two windows of the same session, minutes apart. Because a change in
    machine load between them moves that ratio too, the late window is also interleaved run by
    run with the early window of a young session (same agent): a drift-free control.
    """
    sz = bench.sizes
    total = sz.p3_late + sz.p3_window - 1
    tether_sid, base_sid = bench.sid("p3t", 0), bench.sid("p3b", 0)
    young_sid = bench.sid("p3y", 0)
    tether: list[float] = []
    baseline: list[float] = []
    young: list[float] = []

    def notes(session_id: str, n: int) -> float:
        text, expected = f"remember fact-{n}", f"noted: fact-{n}"
        return ms(tether_run(bench, session_id, text, "notes-compact", expected))

    for n in range(1, total + 1):
        if n == sz.p3_late:  # the young session catches up to just before its early window
            for m in range(1, sz.p3_early):
                notes(young_sid, m)
        tether.append(notes(tether_sid, n))
        baseline.append(ms(baseline_run(base_sid, f"remember fact-{n}")))
        if n >= sz.p3_late:
            young.append(notes(young_sid, sz.p3_early + n - sz.p3_late))

    def window(values: list[float], first: int) -> list[float]:
        return values[first - 1 : first - 1 + sz.p3_window]

    early, late = Stats.of(window(tether, sz.p3_early)), Stats.of(window(tether, sz.p3_late))
    control = late.median / statistics.median(young)
    b_early, b_late = window(baseline, sz.p3_early), window(baseline, sz.p3_late)
    b_ratio = statistics.median(b_late) / statistics.median(b_early)
    last = f"#{sz.p3_late}..#{sz.p3_late + sz.p3_window - 1}"
    first = f"#{sz.p3_early}..#{sz.p3_early + sz.p3_window - 1}"
    return Measure(
        id="P3",
        name=f"run #{sz.p3_late} vs run #{sz.p3_early} of one notes session (compaction on)",
        unit="ms",
        tether=late,
        baseline=early,
        baseline_name=f"the same session's runs {first}",
        value=late.median / early.median,
        value_of=f"median of runs {last} / median of runs {first}",
        target=Target("<=", 1.2),
        note=(
            f"'tether' = runs {last}, 'baseline' = runs {first}, sequential Producer.run; "
            f"drift-free control (runs {last} interleaved with runs {first} of a young session): "
            f"{control:.2f}x ({statistics.median(young):.1f} ms young); "
            f"the hand-written task on a session of the same length: {b_ratio:.2f}x "
            f"({statistics.median(b_early):.1f} -> {statistics.median(b_late):.1f} ms, "
            "no compaction: its blob keeps growing)"
        ),
        extra={
            "interleaved_control_ratio": control,
            "young_session_median_ms": statistics.median(young),
            "handwritten_late_over_early": b_ratio,
            "handwritten_early_median_ms": statistics.median(b_early),
            "handwritten_late_median_ms": statistics.median(b_late),
        },
        series={
            "tether_notes_compact_ms": [round(v, 2) for v in tether],
            "handwritten_ms": [round(v, 2) for v in baseline],
        },
    )


# --- P4 ---------------------------------------------------------------------------------------


def append_paced(
    redis_url: str, session_id: str, count: int, interval_s: float, namespace: str
) -> None:
    """Append ``count`` one-event batches to a session's stream, each stamped with the wall-clock
    nanoseconds taken just before its event is built and appended (runs in its own process)."""
    stream = RedisEventStream(redis_from_url(redis_url), keys=RedisKeys(namespace))
    for seq in range(1, count + 1):
        sent_ns = time.time_ns()
        event = AgentEvent(
            type=EventType.STEP_START,
            tenant=TENANT,
            session_id=session_id,
            seq=seq,
            run_id="run-p4",
            payload=TextPayload(text=str(sent_ns)),
        )
        stream.append(TENANT, session_id, [event], fence=1)
        time.sleep(interval_s)


def p4_tail_latency(bench: Bench) -> Measure:
    """Append (another process) -> tail client receipt, both on the machine's wall clock."""
    sz = bench.sizes
    sid = bench.sid("p4", 0)
    latencies: list[float] = []
    failure: list[BaseException] = []

    def follow() -> None:
        try:
            for event in bench.producer.tail(sid, idle_timeout_s=30):
                received_ns = time.time_ns()
                assert isinstance(event.payload, TextPayload)
                latencies.append((received_ns - int(event.payload.text)) / 1e6)
                if event.seq >= sz.p4_events:
                    return
        except BaseException as exc:
            failure.append(exc)

    tail = threading.Thread(target=follow, name="p4-tail")
    tail.start()
    appender = multiprocessing.get_context("spawn").Process(
        target=append_paced,
        args=(
            bench.stack.redis_url, sid, sz.p4_events, sz.p4_interval_s,
            bench.stack.settings.namespace,
        ),
    )
    appender.start()  # spawning takes far longer than the tail needs to reach XREAD BLOCK
    appender.join(timeout=300)
    tail.join(timeout=60)
    if failure or appender.exitcode != 0 or len(latencies) != sz.p4_events:
        raise BenchFailure(
            f"P4 tail got {len(latencies)}/{sz.p4_events} events; appender exit "
            f"{appender.exitcode}; {failure[:1]}"
        )
    stats = Stats.of(latencies[sz.p4_warmup :])
    return Measure(
        id="P4",
        name="event tail latency, append -> tail client",
        unit="ms",
        tether=stats,
        baseline=None,
        baseline_name="-",
        value=stats.p99,
        value_of="p99 (ms)",
        target=Target("<=", 5.0, "ms"),
        value_unit="ms",
        note=(
            f"{sz.p4_events - sz.p4_warmup} events (after {sz.p4_warmup} warm-up), one every "
            f"{sz.p4_interval_s * 1000:g} ms, appended by another process with "
            "RedisEventStream.append (the worker's call); latency = time.time_ns() at receipt "
            "in Producer.tail minus time.time_ns() stamped just before the event was built"
        ),
    )


def p4w_worker_path(bench: Bench) -> Measure:
    """Event creation in a worker -> tail client receipt, for real ``echo`` runs (ms clock)."""
    sz = bench.sizes
    sid = bench.sid("p4w", 0)
    latencies: list[float] = []
    seen = [0]
    stop = threading.Event()

    def follow() -> None:
        while not stop.is_set():
            for event in bench.producer.tail(sid, after_seq=seen[0], idle_timeout_s=0.5):
                latencies.append(time.time_ns() / 1e6 - event.ts_ms)
                seen[0] = event.seq

    tail = threading.Thread(target=follow, name="p4w-tail", daemon=True)
    tail.start()
    last_seq = 0
    for i in range(sz.p4w_runs):
        result = bench.producer.run(sid, f"hi {i}", agent="echo", wait_s=RESULT_TIMEOUT_S)
        check_result(result, f"echo: hi {i}")
        last_seq = result.last_seq
    deadline = time.monotonic() + 30
    while seen[0] < last_seq and time.monotonic() < deadline:
        time.sleep(0.01)  # poll: the tail thread is still receiving the last run's events
    stop.set()
    tail.join(timeout=5)
    stats = Stats.of(latencies)
    return Measure(
        id="P4w",
        name="event latency, worker creates event -> tail client (info)",
        unit="ms",
        tether=stats,
        baseline=None,
        baseline_name="-",
        value=stats.p99,
        value_of="p99 (ms)",
        target=None,
        value_unit="ms",
        note=(
            f"{stats.n} events of {sz.p4w_runs} echo runs; AgentEvent.ts_ms (1 ms resolution) "
            "to receipt; includes the worker's buffering of events until the next flush point "
            "(MODEL_REQUEST, TOOL_CALL, STEP_END, ERROR, FINAL_OUTPUT)"
        ),
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
    children = pool_children(worker.pid)
    if len(children) != 1:
        raise BenchFailure(f"P6 worker {worker.pid} has pool children {children}, want 1")
    child = children[0]
    boot_kib = rss_kib(child)
    lock = threading.Lock()
    done = [0]
    samples: dict[int, int] = {}
    every = max(1, sz.p6_total // 20)
    finished = threading.Event()

    def on_done(_handle: Any) -> None:
        with lock:
            done[0] += 1
            count = done[0]
        if count == sz.p6_first or count == sz.p6_total or count % every == 0:
            samples[count] = rss_kib(child)
        if count >= len(state.handles):
            finished.set()

    start = time.perf_counter()
    for handle in state.handles:
        handle.add_done_callback(on_done)
    if not finished.wait(timeout=max(600.0, sz.p6_total * 0.2)):
        raise BenchFailure(f"P6: only {done[0]}/{len(state.handles)} runs finished")
    elapsed = time.perf_counter() - start
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


#: Every measure, in the order a full run executes them.
MEASURES: dict[str, Callable[[Bench], Measure]] = {
    "P1": p1_latency,
    "P4": p4_tail_latency,
    "P4w": p4w_worker_path,
    "P3": p3_long_session,
    "P2": p2_throughput,
    "P5": p5_submit_rate,
    "P6": p6_worker_rss,
}
