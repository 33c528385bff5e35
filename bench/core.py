"""What every measure shares: sizes, statistics, targets, result rows, and the timed calls.

Latencies are wall-clock times measured in the benchmark client with ``time.perf_counter``:
from just before the call that submits the run until its result is back in the client.
"""

from __future__ import annotations

import json
import math
import statistics
import time
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from celery import Celery

from bench import baselines
from bench.stack import BUCKET, BenchStack, s3_client
from tether.core.results import RunStatus
from tether.producer.client import Producer
from tether.runs.contract import RunResult

#: Longest wait for one result; nothing here should come near it.
RESULT_TIMEOUT_S = 120.0
TENANT = "default"

Op = Literal["<=", ">="]


#: How long the workers may still be writing after the last result a measure awaited.
POST_FINISH_SETTLE_S = 1.0


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
    p2_trials: int = 3
    p3_early: int = 10
    p3_late: int = 1000
    p3_window: int = 60
    p4_events: int = 2000
    p4_warmup: int = 50
    p4_interval_s: float = 0.002
    p4w_runs: int = 100
    p5_requests: int = 10_000
    p5_sessions: int = 1000
    p5_warmup: int = 50
    p6_first: int = 1000
    p6_total: int = 10_000
    p7_runs: int = 100
    p7_warmup: int = 10
    p8_kills: int = 10
    p9_runs: int = 250
    p10_pieces: int = 2000
    p10_interval_s: float = 0.002
    p10_warmup: int = 50
    p10_burst: int = 10_000
    p10_runs: int = 100
    p14_runs: int = 480
    p14_rpm: int = 300
    p14_window_s: float = 60.0
    p14_workers: int = 4
    p14_burst_every_s: float = 20.0
    p14_burst: int = 3
    p14_retry_after_s: float = 2.0
    p11_cases: int = 1000
    p11_epochs: int = 3
    p11_trials: int = 3
    p11_concurrency: int = 16
    p11_workers: int = 2


FULL = Sizes()
QUICK = Sizes(
    p1_runs=5,
    p1_warmup=2,
    p1_sessions=2,
    p2_runs=20,
    p2_sessions=5,
    p2_trials=2,
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
    p7_runs=3,
    p7_warmup=1,
    p8_kills=1,
    p9_runs=10,
    p10_pieces=60,
    p10_interval_s=0.002,
    p10_warmup=5,
    p10_burst=300,
    p10_runs=3,
    # a short variant with the same bound: the 300/min limit over 6 s windows (30 requests + 1)
    p14_runs=40,
    p14_rpm=300,
    p14_window_s=6.0,
    p14_workers=2,
    p14_burst_every_s=2.0,
    p14_burst=2,
    p14_retry_after_s=0.3,
    p11_cases=20,
    p11_trials=1,
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
    late/early ratio for P3, a p99 in ms for P4, an RSS ratio for P6. ``tail_target``, when set,
    bounds the ratio at ``tail_percentile`` (:attr:`tail_value`) too: the p99 for P1, the p95
    for P13's rows: a median alone hides a slow 1% (or 5%).
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
    tail_target: Target | None = None
    tail_percentile: Literal[95, 99] = 99

    @property
    def tail_value(self) -> float | None:
        """The ratio at ``tail_percentile``, Tether / baseline (None without a baseline)."""
        if self.baseline is None:
            return None
        at = "p95" if self.tail_percentile == 95 else "p99"
        theirs: float = getattr(self.baseline, at)
        return None if theirs <= 0 else float(getattr(self.tether, at)) / theirs

    @property
    def met(self) -> bool | None:
        """Whether the target (and the tail target, when set) is met (None: informational)."""
        if self.target is None:
            return None
        tail = self.tail_value
        tail_met = self.tail_target is None or (tail is not None and self.tail_target.met(tail))
        return self.target.met(self.value) and tail_met

    @property
    def target_text(self) -> str:
        """The target cell: ``≤ 1.1x``, with the tail target ``≤ 1.1x, p99 ≤ 1.5x``."""
        if self.target is None:
            return "-"
        tail = (
            f", p{self.tail_percentile} {self.tail_target}" if self.tail_target is not None else ""
        )
        return f"{self.target}{tail}"


@dataclass
class P5State:
    """What P5 leaves for P6: a producer in P6's namespace and the handles of its queued runs."""

    producer: Producer
    handles: list[Any]
    measure: Measure


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
        # a worker writes a batch's archive segment after it announced the run: let the last
        # measure's one land before its bucket goes away
        time.sleep(POST_FINISH_SETTLE_S)
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


def ms(seconds: float) -> float:
    """Seconds to milliseconds."""
    return seconds * 1000.0


def check_result(result: RunResult, expected: str) -> None:
    """Fail unless ``result`` completed with the ``expected`` output."""
    if result.status is not RunStatus.COMPLETED or result.output != expected:
        raise BenchFailure(
            f"run {result.run_id} ended {result.status} with {result.output!r}, "
            f"expected {expected!r}: {result.error_type} {result.error_message}"
        )


def tether_run(bench: Bench, session_id: str, text: str, agent: str, expected: str) -> float:
    """Seconds for one ``Producer.run`` (checked against ``expected``)."""
    start = time.perf_counter()
    result = bench.producer.run(session_id, text, agent=agent, wait_s=RESULT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    check_result(result, expected)
    return elapsed


def ping_run(i: int) -> float:
    """Seconds for one bare Celery round trip (``bench.ping``)."""
    start = time.perf_counter()
    out = baselines.ping.apply_async((i,)).get(timeout=RESULT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if out != i:
        raise BenchFailure(f"bench.ping answered {out!r} to {i!r}")
    return elapsed


def baseline_run(session_id: str, text: str) -> float:
    """Seconds for one hand-written task, ``apply_async().get()``."""
    start = time.perf_counter()
    out = baselines.handwritten.apply_async((session_id, text)).get(timeout=RESULT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if out["output"] != baselines.scripted_answer(text):
        raise BenchFailure(f"hand-written task answered {out!r} to {text!r}")
    return elapsed
