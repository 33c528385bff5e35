"""The measures P1..P6 (plus P4w, informational), each run against its baseline in one go.

Every measure starts from an empty bucket (moto is reset and the bucket re-created), so the
amount of data earlier measures left in moto cannot slow a later one down (moto's LIST walks the
whole bucket, real S3 does not). Session ids carry a per-run tag, so Redis state never collides.

Latencies are wall-clock times measured in the benchmark client with ``time.perf_counter``:
from just before the call that submits the run until its result is back in the client.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import re
import statistics
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from celery import Celery
from celery.result import AsyncResult, ResultSet

from bench import baselines
from bench.stack import BUCKET, BenchStack, pool_children, rss_kib, s3_client
from producer.client import Producer, RunSpec
from shared.events import AgentEvent, EventType, TextPayload
from shared.keys import RedisKeys
from shared.redis_conn import redis_from_url
from shared.results import RunStatus
from shared.runs import RunResult
from shared.streams.redis import RedisEventStream

#: Longest wait for one result; nothing here should come near it.
RESULT_TIMEOUT_S = 120.0
#: Redis namespace of P5/P6: its own active set, so the fleet's sweepers never touch those runs.
P6_NAMESPACE = "bench-p6"
#: A queue nobody consumes: bare Celery's bulk submit goes there and is purged afterwards.
BULK_QUEUE = "bench-bulk"
TENANT = "default"

Op = Literal["<=", ">="]


class BenchFailure(RuntimeError):
    """A measure could not produce a valid figure (a wrong answer, a lost run, a timeout)."""


@dataclass(frozen=True)
class Sizes:
    """How much each measure does (:data:`FULL` is the issue's definition)."""

    p1_runs: int = 200
    p1_warmup: int = 20
    p1_sessions: int = 10
    p2_runs: int = 2000
    p2_sessions: int = 500
    p2_trials: int = 1
    p3_early: int = 10
    p3_late: int = 1000
    p3_window: int = 20
    p4_events: int = 2000
    p4_warmup: int = 50
    p4_interval_s: float = 0.002
    p4w_runs: int = 100
    p5_requests: int = 10_000
    p5_sessions: int = 1000
    p5_warmup: int = 50
    p6_first: int = 1000
    p6_total: int = 10_000


FULL = Sizes()
QUICK = Sizes(
    p1_runs=5,
    p1_warmup=2,
    p1_sessions=2,
    p2_runs=20,
    p2_sessions=5,
    p3_early=2,
    p3_late=8,
    p3_window=2,
    p4_events=40,
    p4_warmup=5,
    p4w_runs=3,
    p5_requests=60,
    p5_sessions=10,
    p5_warmup=5,
    p6_first=10,
    p6_total=60,
)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True)
class Stats:
    """Summary of one sample."""

    n: int
    median: float
    p95: float
    p99: float
    mean: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        """Summarise ``values`` (at least one)."""
        return cls(
            n=len(values),
            median=statistics.median(values),
            p95=percentile(values, 95),
            p99=percentile(values, 99),
            mean=statistics.fmean(values),
            min=min(values),
            max=max(values),
        )


@dataclass(frozen=True)
class Target:
    """A target such as ``<= 1.25`` (x) or ``<= 5`` (ms)."""

    op: Op
    value: float
    unit: str = "x"

    def met(self, observed: float) -> bool:
        """Whether ``observed`` meets the target."""
        return observed <= self.value if self.op == "<=" else observed >= self.value

    def __str__(self) -> str:
        sign = "≤" if self.op == "<=" else "≥"
        sep = "" if self.unit == "x" else " "
        return f"{sign} {self.value:g}{sep}{self.unit}"


@dataclass
class Measure:
    """One row of the result table.

    ``value`` is the figure compared with ``target``: a Tether/baseline ratio for P1, P2, P5, a
    late/early ratio for P3, a p99 in ms for P4, an RSS ratio for P6.
    """

    id: str
    name: str
    unit: str
    tether: Stats
    baseline: Stats | None
    baseline_name: str
    value: float
    value_of: str
    target: Target | None
    value_unit: str = "x"
    note: str = ""
    extra: dict[str, float | int | str] = field(default_factory=dict)
    series: dict[str, list[float]] = field(default_factory=dict)

    @property
    def met(self) -> bool | None:
        """Whether the target is met (None: informational row)."""
        return None if self.target is None else self.target.met(self.value)


class Bench:
    """The running stack plus what every measure shares (sizes, a run tag, clients)."""

    def __init__(self, stack: BenchStack, sizes: Sizes) -> None:
        self.stack = stack
        self.sizes = sizes
        self.tag = uuid.uuid4().hex[:6]
        self.producer = stack.producer
        self.baseline_app: Celery = baselines.configure(stack.redis_url)
        self._s3 = s3_client(stack.s3_endpoint)
        self.p5_state: P5State | None = None

    def fresh_bucket(self) -> None:
        """Reset moto and re-create the bucket (every measure starts from empty storage)."""
        request = urllib.request.Request(self.stack.s3_endpoint + "/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=30):
            pass
        self._s3.create_bucket(Bucket=BUCKET)

    def sid(self, measure: str, n: int | str) -> str:
        """A session id unique to this benchmark run."""
        return f"{self.tag}-{measure}-{n}"

    def blob_messages(self, session_id: str) -> int:
        """How many messages the hand-written task's blob of ``session_id`` holds."""
        body = self._s3.get_object(Bucket=BUCKET, Key=baselines.blob_key(session_id))["Body"]
        return len(json.loads(body.read())["messages"])


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def _check(result: RunResult, expected: str) -> None:
    if result.status is not RunStatus.COMPLETED or result.output != expected:
        raise BenchFailure(
            f"run {result.run_id} ended {result.status} with {result.output!r}, "
            f"expected {expected!r}: {result.error_type} {result.error_message}"
        )


def _tether_run(bench: Bench, session_id: str, text: str, agent: str, expected: str) -> float:
    start = time.perf_counter()
    result = bench.producer.run(session_id, text, agent=agent, wait_s=RESULT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    _check(result, expected)
    return elapsed


def _ping_run(i: int) -> float:
    start = time.perf_counter()
    out = baselines.ping.apply_async((i,)).get(timeout=RESULT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if out != i:
        raise BenchFailure(f"bench.ping answered {out!r} to {i!r}")
    return elapsed


def _baseline_run(session_id: str, text: str) -> float:
    start = time.perf_counter()
    out = baselines.handwritten.apply_async((session_id, text)).get(timeout=RESULT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if out["output"] != baselines.scripted_answer(text):
        raise BenchFailure(f"hand-written task answered {out!r} to {text!r}")
    return elapsed


# --- request counts ---------------------------------------------------------------------------

_S3_LINE = re.compile(r'"(?:\x1b\[[0-9;]*m)?(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP')


def _s3_kind(method: str, path: str) -> str:
    if method == "GET" and ("list-type=" in path or "prefix=" in path):
        return "LIST"
    if "/events/" in path:
        return f"{method} segment"
    if path.endswith("/head.json"):
        return f"{method} head"
    return f"{method} object"


def _redis_calls(client: Any) -> dict[str, int]:
    stats = client.info("commandstats")
    return {str(k).removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def count_requests(bench: Bench, runs: int, one: Callable[[int], object]) -> dict[str, float]:
    """Redis commands (all clients: producer, workers, idle polling) and S3 requests per run
    while ``one(i)`` runs ``runs`` times in a row; approximate, for the profile, not a target."""
    client = bench.stack.redis.client()
    try:
        log = bench.stack.moto_log
        offset = log.stat().st_size
        before = _redis_calls(client)
        for i in range(runs):
            one(i)
        after = _redis_calls(client)
        with log.open("rb") as handle:
            handle.seek(offset)
            lines = handle.read().decode(errors="replace").splitlines()
    finally:
        client.close()
    out: dict[str, float] = {}
    redis_total = 0
    for name, calls in after.items():
        delta = calls - before.get(name, 0)
        if delta > 0 and name != "info":
            redis_total += delta
            out[f"redis {name}"] = round(delta / runs, 2)
    out["redis commands"] = round(redis_total / runs, 2)
    s3_total = 0
    for line in lines:
        match = _S3_LINE.search(line)
        if match and "/moto-api" not in match.group(2):
            s3_total += 1
            key = f"s3 {_s3_kind(match.group(1), match.group(2))}"
            out[key] = out.get(key, 0) + 1 / runs
    out["s3 requests"] = round(s3_total / runs, 2)
    return {k: round(v, 2) for k, v in sorted(out.items())}


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
            t = _tether_run(bench, sid, text, "echo", f"echo: {text}")
            b = _baseline_run(sid, text)
        else:
            b = _baseline_run(sid, text)
            t = _tether_run(bench, sid, text, "echo", f"echo: {text}")
        p = _ping_run(i)
        if i >= sz.p1_warmup:
            tether.append(_ms(t))
            baseline.append(_ms(b))
            bare.append(_ms(p))
    ts, bs, ps = Stats.of(tether), Stats.of(baseline), Stats.of(bare)
    count = max(10, sz.p1_runs // 4)
    t_ops = count_requests(
        bench,
        count,
        lambda i: _tether_run(bench, bench.sid("p1", i % sz.p1_sessions), "x", "echo", "echo: x"),
    )
    b_ops = count_requests(
        bench, count, lambda i: _baseline_run(bench.sid("p1", i % sz.p1_sessions), "x")
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
        _check(result, f"echo: {spec.input}")
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


def _log_sizes(bench: Bench) -> list[int]:
    return [w.log_path.stat().st_size for w in bench.stack.tether.workers]


def _count_in_logs(bench: Bench, offsets: list[int], pattern: str) -> int:
    """Matches of ``pattern`` in the Tether workers' logs after ``offsets``."""
    found = 0
    for worker, offset in zip(bench.stack.tether.workers, offsets, strict=True):
        with worker.log_path.open("rb") as handle:
            handle.seek(offset)
            found += len(re.findall(pattern, handle.read().decode(errors="replace")))
    return found


def p2_throughput(bench: Bench) -> Measure:
    """Runs per second for a burst over many sessions, 2 worker processes on each side."""
    sz = bench.sizes
    tether: list[float] = []
    baseline: list[float] = []
    lost = 0
    offsets = _log_sizes(bench)
    for trial in range(sz.p2_trials):
        t = _tether_batch(bench, bench.sid("p2t", trial), sz.p2_runs, sz.p2_sessions)
        tether.append(sz.p2_runs / t)
        b, lost_now = _baseline_batch(bench, bench.sid("p2b", trial), sz.p2_runs, sz.p2_sessions)
        baseline.append(sz.p2_runs / b)
        lost += lost_now
    kicks = _count_in_logs(bench, offsets, "sweeper re-enqueued")
    drains = _count_in_logs(bench, offsets, r"Task tether\.drain\[[^\]]+\] received")
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
        return _ms(_tether_run(bench, session_id, text, "notes-compact", expected))

    for n in range(1, total + 1):
        if n == sz.p3_late:  # the young session catches up to just before its early window
            for m in range(1, sz.p3_early):
                notes(young_sid, m)
        tether.append(notes(tether_sid, n))
        baseline.append(_ms(_baseline_run(base_sid, f"remember fact-{n}")))
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
        _check(result, f"echo: hi {i}")
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


@dataclass
class P5State:
    """What P5 leaves for P6: a producer in P6's namespace and the handles of its queued runs."""

    producer: Producer
    handles: list[Any]
    measure: Measure


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
