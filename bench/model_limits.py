"""P14: a fleet-wide model limit held by 4 worker processes, measured on the provider's side.

4 single-process workers run ``assistant`` runs (one model call each) against the test OpenAI
server (:mod:`tests.support.openai_server`, its own process), with ``TETHER_MODEL_LIMITS``
giving the model ``p14_rpm`` requests per minute. Every run is submitted at once, so the limit,
not the submitter, sets the pace. The server stamps each request as it arrives
(``received_at``); the figures come from those stamps:

- **P14** the most requests the server saw in any window of ``p14_window_s`` (60 s: the limit's
  own minute); the GCRA admits at most the window's share of the limit plus one;
- **P14u** the allowance used: the requests in the busiest window over the window's share of
  the limit (a limiter that holds the bound by leaving the model idle would miss this one);
- **P14r** the same runs while the server answers a burst of 429s (``Retry-After``) every
  ``p14_burst_every_s``: every run must complete; the note says how many 429s the fleet saw and
  how many requests arrived while the model was paused (none: the pause begins when the 429
  is answered and lasts its Retry-After, and the next request arrives after it).

The quick sizes are a short variant, stated as such: the same 300/min limit measured over 6 s
windows (the same bound: the window's share of the limit plus one), 40 runs on 2 workers.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass

from bench.core import RESULT_TIMEOUT_S, Bench, BenchFailure, Measure, Stats, Target
from bench.stack import bench_settings
from tests.support.openai_fixture import OpenAIServer, start_openai_server
from tether.core.results import RunStatus
from tether.dev.workers import WorkerProcess
from tether.producer.client import Producer

QUEUE = "p14"
MODEL = "test-model"
ANSWER = "within the limit"


@dataclass(frozen=True)
class Traffic:
    """What one P14 variant did: the server's arrival stamps and the runs' outcomes."""

    arrivals: list[float]
    """Wall-clock seconds each model request arrived at the server, sorted."""
    statuses: list[int]
    """The status each request was answered with (in arrival order)."""
    completed: int
    failed: int
    wall_s: float
    rpm: int
    window_s: float
    retry_after_s: float

    @property
    def window_share(self) -> float:
        """The limit's share of one window: what the window may hold (plus one)."""
        return self.rpm * self.window_s / 60

    def busiest_window(self) -> int:
        """The most arrivals in any closed window of ``window_s`` seconds."""
        best, j = 0, 0
        for i, start in enumerate(self.arrivals):
            while j < len(self.arrivals) and self.arrivals[j] <= start + self.window_s:
                j += 1
            best = max(best, j - i)
        return best

    def rate_limited(self) -> int:
        """How many requests the server answered 429."""
        return sum(1 for s in self.statuses if s == 429)

    def during_pauses(self) -> int:
        """Requests that arrived less than Retry-After after a 429 arrived (the fleet's pause
        begins later, when the 429 is answered, so any such request went through a pause)."""
        stamps = [t for t, s in zip(self.arrivals, self.statuses, strict=True) if s == 429]
        return sum(1 for r in stamps for t in self.arrivals if r < t < r + self.retry_after_s)


_cache: dict[int, tuple[Traffic, Traffic]] = {}


def _start_workers(bench: Bench, server: OpenAIServer, rpm: int) -> list[WorkerProcess]:
    stack = bench.stack
    env = {
        **stack.env,
        "TETHER_QUEUE": QUEUE,
        "TETHER_OPENAI_BASE_URL": server.base_url,
        "TETHER_OPENAI_API_KEY": server.api_key,
        "TETHER_OPENAI_MODEL": MODEL,
        "TETHER_OPENAI_API": "chat",
        "TETHER_MODEL_LIMITS": json.dumps({MODEL: {"requests_per_minute": rpm}}),
    }
    workers = [
        WorkerProcess(f"p14w{i + 1}", env, stack.log_dir, concurrency=1, queue=QUEUE)
        for i in range(bench.sizes.p14_workers)
    ]
    stack.extra_workers.extend(workers)
    for worker in workers:  # boot in parallel: each interpreter start costs seconds
        worker.start(wait=False)
    for worker in workers:
        worker.wait_ready(120.0)
    return workers


def _bursts(server: OpenAIServer, bench: Bench, stop: threading.Event) -> None:
    """Every ``p14_burst_every_s``, the next ``p14_burst`` requests get 429 + Retry-After."""
    sz = bench.sizes
    while not stop.wait(sz.p14_burst_every_s):
        server.fail_next(
            sz.p14_burst, 429, retry_after_s=sz.p14_retry_after_s, message="p14 rate limit"
        )


def traffic(bench: Bench) -> tuple[Traffic, Traffic]:
    """Both P14 variants, plain then with 429 bursts, on one set of workers: run once per
    benchmark run (P14, P14u and P14r read them)."""
    if id(bench) not in _cache:
        sz, stack = bench.sizes, bench.stack
        server = start_openai_server("sk-p14-" + secrets.token_hex(8))
        workers: list[WorkerProcess] = []
        producer = Producer(bench_settings(stack.redis_url, stack.s3_endpoint, queue=QUEUE))
        try:
            workers = _start_workers(bench, server, sz.p14_rpm)
            plain = _run(bench, server, producer, bursts=False)
            # the budget's GCRA state carries over: the second variant starts on the same pace
            _cache[id(bench)] = plain, _run(bench, server, producer, bursts=True)
        finally:
            producer.close()
            for worker in workers:
                worker.stop()
                stack.extra_workers.remove(worker)
            server.close()
    return _cache[id(bench)]


def _run(bench: Bench, server: OpenAIServer, producer: Producer, *, bursts: bool) -> Traffic:
    sz = bench.sizes
    server.reset()
    server.default_reply(ANSWER)
    stop = threading.Event()
    burster = threading.Thread(target=_bursts, args=(server, bench, stop), daemon=True)
    name = "p14r" if bursts else "p14"
    started = time.monotonic()
    if bursts:
        burster.start()
    try:
        handles = [
            producer.run_async(bench.sid(name, n), "hi", agent="assistant")
            for n in range(sz.p14_runs)
        ]
        timeout_s = RESULT_TIMEOUT_S + sz.p14_runs * 60 / sz.p14_rpm * 3
        results = [h.run_result(timeout=timeout_s) for h in handles]
        wall_s = time.monotonic() - started
    finally:
        stop.set()
    requests = sorted(server.model_requests(), key=lambda r: r.received_at)
    ok = [r for r in results if r.status is RunStatus.COMPLETED and r.output == ANSWER]
    completed = len(ok)
    return Traffic(
        arrivals=[r.received_at for r in requests],
        statuses=[r.status for r in requests],
        completed=completed,
        failed=len(results) - completed,
        wall_s=wall_s,
        rpm=sz.p14_rpm,
        window_s=sz.p14_window_s,
        retry_after_s=sz.p14_retry_after_s,
    )


def _setup(t: Traffic, bench: Bench) -> str:
    return (
        f"{bench.sizes.p14_runs} assistant runs (one model call each) submitted at once to "
        f"{bench.sizes.p14_workers} single-process workers, TETHER_MODEL_LIMITS {t.rpm} "
        f"requests/min for the model, the test OpenAI server in its own process stamping each "
        f"request's arrival; {len(t.arrivals)} requests in {t.wall_s:.1f} s"
    )


def _extra(t: Traffic) -> dict[str, float | int | str]:
    busiest = t.busiest_window()
    return {
        "busiest window (requests)": busiest,
        "window (s)": t.window_s,
        "limit per window": round(t.window_share, 1),
        "allowance used (%)": round(100 * busiest / t.window_share, 1),
        "runs completed": t.completed,
        "runs failed": t.failed,
        "requests": len(t.arrivals),
        "429s": t.rate_limited(),
        "requests during a pause": t.during_pauses(),
        "wall time (s)": round(t.wall_s, 1),
    }


def p14_limit_window(bench: Bench) -> Measure:
    """The most requests the server saw in any window, against the limit's share plus one."""
    t = traffic(bench)[0]
    if t.failed:
        raise BenchFailure(f"P14: {t.failed} of {t.completed + t.failed} runs did not complete")
    busiest = t.busiest_window()
    return Measure(
        id="P14",
        name=f"most model requests in any {t.window_s:g} s window, {t.rpm}/min fleet limit",
        unit="requests",
        tether=Stats.of([float(busiest)]),
        baseline=None,
        baseline_name="-",
        value=float(busiest),
        value_of=f"requests in the busiest {t.window_s:g} s",
        target=Target("<=", t.window_share + 1, "requests"),
        value_unit="requests",
        extra=_extra(t),
        note=_setup(t, bench) + "; windows slid over every arrival, closed at both ends",
    )


def p14u_allowance_used(bench: Bench) -> Measure:
    """How much of the limit the fleet used in its busiest window."""
    t = traffic(bench)[0]
    used = 100 * t.busiest_window() / t.window_share
    most = 100 * (t.window_share + 1) / t.window_share
    return Measure(
        id="P14u",
        name=f"share of the {t.rpm}/min model limit the fleet used",
        unit="%",
        tether=Stats.of([used]),
        baseline=None,
        baseline_name="-",
        value=used,
        value_of=f"requests in the busiest {t.window_s:g} s / limit",
        target=Target(">=", 95.0, "%"),
        value_unit="%",
        extra=_extra(t),
        note=(
            f"{_setup(t, bench)} (the same traffic as P14); the busiest closed window may hold "
            f"the limit's share plus one, so up to {most:.1f}%"
        ),
    )


def p14r_rate_limited(bench: Bench) -> Measure:
    """The same runs while the server answers bursts of 429s: every run completes."""
    sz = bench.sizes
    t = traffic(bench)[1]
    return Measure(
        id="P14r",
        name="runs failed while the provider answers bursts of 429 (Retry-After)",
        unit="runs",
        tether=Stats.of([float(t.failed)]),
        baseline=None,
        baseline_name="-",
        value=float(t.failed),
        value_of="runs failed",
        target=Target("<=", 0, "runs"),
        value_unit="runs",
        extra=_extra(t),
        note=(
            f"{_setup(t, bench)}; every {sz.p14_burst_every_s:g} s the server answers the next "
            f"{sz.p14_burst} requests 429 with Retry-After {sz.p14_retry_after_s:g} s: "
            f"{t.rate_limited()} 429s, each pausing the model fleet-wide (the SDK retries no "
            f"429 of a limited model), {t.during_pauses()} requests arrived during a pause, "
            f"{t.completed} of {sz.p14_runs} runs completed"
        ),
    )
