"""Latency measures: P1 (one run end to end), P3 (a long session), P4 and P4w (event tail).

See :mod:`bench.measures` for how measures are run and :mod:`bench.core` for how latencies are
taken.
"""

from __future__ import annotations

import multiprocessing
import statistics
import threading
import time

from bench.core import (
    RESULT_TIMEOUT_S,
    TENANT,
    Bench,
    BenchFailure,
    Measure,
    Stats,
    Target,
    baseline_run,
    check_result,
    ms,
    ping_run,
    tether_run,
)
from bench.counting import count_requests, count_sent
from bench.round_trips import counting, sum_tallies, worker_path
from bench.stack import BUCKET
from tether.core.events import AgentEvent, EventType, TextPayload
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.persistence.streams.redis import RedisEventStream

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
    t_ops |= count_sent(
        bench,
        count,
        lambda i: tether_run(bench, bench.sid("p1", i % sz.p1_sessions), "y", "echo", "echo: y"),
    )
    b_ops |= count_sent(
        bench, count, lambda i: baseline_run(bench.sid("p1", i % sz.p1_sessions), "y")
    )
    with counting() as tallies:  # the producer of the same runs is this process
        for i in range(count):
            tether_run(bench, bench.sid("p1", i % sz.p1_sessions), "z", "echo", "echo: z")
    producer = sum_tallies(tallies)
    t_ops["producer round trips"] = round(producer.round_trips / count, 2)
    t_ops["producer commands"] = round(producer.commands / count, 2)
    t_ops |= worker_path(bench.stack.redis_url, bench.stack.s3_endpoint, BUCKET, count)
    return Measure(
        id="P1",
        name="1-step echo run, end-to-end latency",
        unit="ms",
        tether=ts,
        baseline=bs,
        baseline_name="hand-written task, apply_async().get()",
        value=ts.median / bs.median,
        value_of="median Tether / median baseline",
        target=Target("<=", 1.1),
        tail_target=Target("<=", 1.5),
        note=(
            f"{sz.p1_runs} runs each (after {sz.p1_warmup} warm-up), interleaved, "
            f"{sz.p1_sessions} sessions round robin; p95 ratio {ts.p95 / bs.p95:.2f}x, "
            f"p99 ratio {ts.p99 / bs.p99:.2f}x; "
            f"bare Celery round trip (no-op task, apply_async().get()): median "
            f"{ps.median:.1f} ms, p95 {ps.p95:.1f} ms"
        ),
        extra={
            "p95_ratio": ts.p95 / bs.p95,
            "p99_ratio": ts.p99 / bs.p99,
            "bare_celery_median_ms": ps.median,
            "bare_celery_p95_ms": ps.p95,
            **{f"tether per run: {k}": v for k, v in t_ops.items()},
            **{f"hand-written per run: {k}": v for k, v in b_ops.items()},
        },
    )


# --- P3 ---------------------------------------------------------------------------------------


def _p3_runs(bench: Bench) -> tuple[list[float], list[float], list[float]]:
    """Latencies (ms) of P3's three sessions: the long Tether session (runs #1..#late+window-1),
    the hand-written task's session run alongside it, and the young session's early window,
    interleaved run by run with the long session's late window."""
    sz = bench.sizes
    tether_sid, base_sid = bench.sid("p3t", 0), bench.sid("p3b", 0)
    young_sid = bench.sid("p3y", 0)
    tether: list[float] = []
    baseline: list[float] = []
    young: list[float] = []

    def notes(session_id: str, n: int) -> float:
        text, expected = f"remember fact-{n}", f"noted: fact-{n}"
        return ms(tether_run(bench, session_id, text, "notes-compact", expected))

    for n in range(1, sz.p3_late + sz.p3_window):
        if n == sz.p3_late:  # the young session catches up to just before its early window
            for m in range(1, sz.p3_early):
                notes(young_sid, m)
        in_window = n >= sz.p3_late
        # alternate which session goes first: the run right after another Tether run can find
        # that run's worker still busy after its finish (its archive write)
        young_first = in_window and n % 2 == 1
        if young_first:
            young.append(notes(young_sid, sz.p3_early + n - sz.p3_late))
        tether.append(notes(tether_sid, n))
        baseline.append(ms(baseline_run(base_sid, f"remember fact-{n}")))
        if in_window and not young_first:
            young.append(notes(young_sid, sz.p3_early + n - sz.p3_late))
    return tether, baseline, young


def p3_long_session(bench: Bench) -> Measure:
    """Latency of run #late of one long ``notes-compact`` session against run #early of a
    young one, measured alternately.

    The late window of the long session is interleaved run by run with the early window of a
    young session (same agent), so a change in machine load moves both sides alike. The same
    session's own early window, minutes earlier, is reported beside it: that ratio also moves
    with the machine's load between the two windows.
    """
    sz = bench.sizes
    tether, baseline, young = _p3_runs(bench)

    def window(values: list[float], first: int) -> list[float]:
        return values[first - 1 : first - 1 + sz.p3_window]

    early, late = Stats.of(window(tether, sz.p3_early)), Stats.of(window(tether, sz.p3_late))
    alongside = Stats.of(young)
    same_session = late.median / early.median
    b_early, b_late = window(baseline, sz.p3_early), window(baseline, sz.p3_late)
    b_ratio = statistics.median(b_late) / statistics.median(b_early)
    last = f"#{sz.p3_late}..#{sz.p3_late + sz.p3_window - 1}"
    first = f"#{sz.p3_early}..#{sz.p3_early + sz.p3_window - 1}"
    return Measure(
        id="P3",
        name=f"run #{sz.p3_late} vs run #{sz.p3_early} of a notes session (compaction on)",
        unit="ms",
        tether=late,
        baseline=alongside,
        baseline_name=f"runs {first} of a young session, alternating with them",
        value=late.median / alongside.median,
        value_of=f"median of runs {last} / median of a young session's runs {first}",
        target=Target("<=", 1.1),
        note=(
            f"'tether' = runs {last} of the long session, 'baseline' = runs {first} of a young "
            "session (same agent), one of each in turn, sequential Producer.run; "
            f"the long session's own runs {first}, minutes earlier: {early.median:.1f} ms, "
            f"{same_session:.2f}x (moves with the machine's load too); "
            f"the hand-written task on a session of the same length: {b_ratio:.2f}x "
            f"({statistics.median(b_early):.1f} -> {statistics.median(b_late):.1f} ms, "
            "no compaction: its blob keeps growing)"
        ),
        extra={
            "same_session_ratio": same_session,
            "same_session_early_median_ms": early.median,
            "handwritten_late_over_early": b_ratio,
            "handwritten_early_median_ms": statistics.median(b_early),
            "handwritten_late_median_ms": statistics.median(b_late),
        },
        series={
            "tether_notes_compact_ms": [round(v, 2) for v in tether],
            "young_session_ms": [round(v, 2) for v in young],
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
            bench.stack.redis_url,
            sid,
            sz.p4_events,
            sz.p4_interval_s,
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
