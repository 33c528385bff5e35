"""P16: 10,000 timers due in the same minute, 2 sweepers: how late each wake is submitted, and
that each timer is woken exactly once; beside a hand-rolled single-key scheduler measured in the
same run.

    python -m bench.timers               # the issue's size: 10,000 timers (~3 min)
    python -m bench.timers --quick       # 1,000 timers over 10 s (a smoke run)

A private redis-server. The timers are parked as workers park them (a wait record per session,
the sharded timers index, :class:`~tether.runs.waits.redis.RedisWaitIndex`), due uniformly over
one minute starting a few seconds after parking. Two sweeper processes run the worker's timers
loop (:func:`~tether.worker.engine.wakes.wake_due`, then a pause until the next due time, at most
``TETHER_SWEEP_INTERVAL_MS``, 1 s, the default), each wake a real registration of the
continuation run in its session's queue (the submit script); a wake's lateness is the time of
its registration minus its due time.

The baseline is what one writes by hand: one sorted set, two pollers that read the due members
(``ZRANGEBYSCORE``) and claim each with ``ZREM`` (a member is theirs when it answers 1), then
register the same continuations the same way, pausing as the worker's loop does (until the
next due time, at most the sweep period): the sides differ in the index and how a member is
claimed, not in when they look.

Results: ``bench/results/p16.json`` and ``p16.md``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import redis

from bench.core import percentile
from bench.report import host_info, now_iso
from tether.core.events import now_ms
from tether.core.waits import WaitFor
from tether.dev.redis_server import RedisServer
from tether.keys import RedisKeys
from tether.runs.queue.redis import RedisRunQueue
from tether.runs.waits.base import TimerMember, WaitRecord
from tether.runs.waits.redis import RedisWaitIndex
from tether.worker.engine.services import EngineServices
from tether.worker.engine.wakes import NextPass, next_pass, wake_due, wake_request

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_P99_S = 1.0
SWEEPERS = 2


class _Sweeper:
    """What :func:`wake_due` reads of a worker's services, recording each wake it submits."""

    def __init__(self, url: str, prefix: str) -> None:
        client = redis.Redis.from_url(url)
        keys = RedisKeys(prefix)
        self.waits = RedisWaitIndex(client, keys)
        self.runs = RedisRunQueue(client, keys, result_ttl_s=3600)
        self.woken: list[tuple[str, int]] = []

    def wake(self, tenant: str, session_id: str) -> None:
        self.woken.append((session_id, now_ms()))


def _tether_sweeper(url: str, prefix: str, interval_s: float, until_s: float, out: Any) -> None:
    sweeper = _Sweeper(url, prefix)
    services = cast(EngineServices, sweeper)
    upcoming = NextPass(0.0, take=True)
    while time.time() < until_s:  # the worker's timers thread (tether.worker.sweeper)
        time.sleep(upcoming.pause_s)
        if upcoming.take:
            wake_due(services)
        upcoming = next_pass(services, interval_s)
    out.put(sweeper.woken)


def _naive_sweeper(url: str, prefix: str, interval_s: float, until_s: float, out: Any) -> None:
    sweeper = _Sweeper(url, prefix)
    client = redis.Redis.from_url(url)
    key = f"{prefix}:{{~naive}}"
    while time.time() < until_s:
        due = client.zrangebyscore(key, "-inf", now_ms(), start=0, num=200)
        pipe = client.pipeline(transaction=False)
        for member in due:
            pipe.zrem(key, member)
        claimed = [m.decode() for m, won in zip(due, pipe.execute(), strict=True) if won]
        members = [m for m in map(TimerMember.parse, claimed) if m is not None]
        records = [r for r in sweeper.waits.get_many(members) if r is not None]
        requests = [wake_request(r, now_ms()) for r in records]
        for request, outcome in zip(requests, sweeper.runs.submit_many(requests), strict=True):
            if outcome.state == "queued":
                sweeper.wake(request.tenant, request.session_id)
        if len(due) < 200:  # as the worker's loop: until the next due time, at most a period
            first = client.zrange(key, 0, 0, withscores=True)
            next_s = (first[0][1] - now_ms()) / 1000 if first else interval_s
            time.sleep(min(interval_s, max(0.005, next_s)))
    out.put(sweeper.woken)


def _park(url: str, prefix: str, count: int, start_ms: int, spread_ms: int) -> dict[str, int]:
    """Park ``count`` timers due uniformly over ``spread_ms`` from ``start_ms``; their sessions'
    due times."""
    index = RedisWaitIndex(redis.Redis.from_url(url), RedisKeys(prefix))
    due = {f"s-{n}": start_ms + n * spread_ms // count for n in range(count)}
    records = [
        WaitRecord(
            tenant="bench",
            session_id=sid,
            call_id="call_1",
            run_id=f"run-{sid}",
            agent="sleeper",
            wait_for=WaitFor(kind="timer", due_at_ms=at),
        )
        for sid, at in due.items()
    ]
    for n in range(0, len(records), 1000):
        index.park(records[n : n + 1000])
    return due


def _naive_index(url: str, prefix: str, due: dict[str, int]) -> None:
    """The baseline's one sorted set, holding the same timers."""
    client = redis.Redis.from_url(url)
    members = {TimerMember("bench", sid, "call_1").text(): at for sid, at in due.items()}
    client.zadd(f"{prefix}:{{~naive}}", members)


def measure(url: str, side: str, count: int, spread_s: float, interval_s: float) -> dict[str, Any]:
    """One side: park, sweep with :data:`SWEEPERS` processes, and report."""
    prefix = f"p16-{side}-{now_ms()}"
    start_ms = now_ms() + 5_000
    due = _park(url, prefix, count, start_ms, int(spread_s * 1000))
    if side == "naive":
        _naive_index(url, prefix, due)
    until_s = start_ms / 1000 + spread_s + 10
    target: Callable[..., None] = _naive_sweeper if side == "naive" else _tether_sweeper
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(url, prefix, interval_s, until_s, out))
        for _ in range(SWEEPERS)
    ]
    for proc in procs:
        proc.start()
    woken = [w for _ in procs for w in out.get()]
    for proc in procs:
        proc.join()
    return _report(side, due, woken)


def _report(side: str, due: dict[str, int], woken: list[tuple[str, int]]) -> dict[str, Any]:
    late_s = [(at - due[sid]) / 1000 for sid, at in woken]
    per_timer = {sid: 0 for sid in due}
    for sid, _ in woken:
        per_timer[sid] += 1
    return {
        "side": side,
        "timers": len(due),
        "woken": len(woken),
        "woken_once": sum(1 for n in per_timer.values() if n == 1),
        "woken_twice_or_more": sum(1 for n in per_timer.values() if n > 1),
        "never_woken": sum(1 for n in per_timer.values() if n == 0),
        "lateness_p50_s": round(statistics.median(late_s), 3),
        "lateness_p95_s": round(percentile(late_s, 95), 3),
        "lateness_p99_s": round(percentile(late_s, 99), 3),
        "lateness_max_s": round(max(late_s), 3),
        "early": sum(1 for s in late_s if s < 0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.timers", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--timers", type=int, default=None)
    parser.add_argument("--interval-s", type=float, default=1.0)
    args = parser.parse_args(argv)
    count = args.timers or (1_000 if args.quick else 10_000)
    spread_s = 10.0 if args.quick else 60.0
    server = RedisServer(unix_socket=False).start()
    try:
        sides = [
            measure(server.url, side, count, spread_s, args.interval_s)
            for side in ("tether", "naive")
        ]
    finally:
        server.close()
    doc = {
        "benchmark": "P16 timers",
        "when": now_iso(),
        "command": "python -m bench.timers" + (" --quick" if args.quick else ""),
        "target": f"lateness p99 <= {TARGET_P99_S} s; each timer woken exactly once",
        "sweep_interval_s": args.interval_s,
        "sweepers": SWEEPERS,
        "spread_s": spread_s,
        "sides": sides,
        "host": host_info(["redis"]),
    }
    name = "p16-quick" if args.quick else "p16"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(_markdown(doc))
    print(_markdown(doc))
    return 0


def _markdown(doc: dict[str, Any]) -> str:
    rows = [
        f"| {s['side']} | {s['timers']:,} | {s['woken_once']:,} | {s['woken_twice_or_more']} | "
        f"{s['never_woken']} | {s['lateness_p50_s']} | {s['lateness_p95_s']} | "
        f"{s['lateness_p99_s']} | {s['lateness_max_s']} |"
        for s in doc["sides"]
    ]
    return "\n".join(
        [
            f"# P16: timers due in the same minute ({doc['when']})",
            "",
            f"`{doc['command']}`: {doc['sweepers']} sweepers, one pass every "
            f"{doc['sweep_interval_s']} s, timers due uniformly over {doc['spread_s']:g} s. "
            f"Target: {doc['target']}. Load at the end: {doc['host']['load_average_1m_end']} "
            f"on {doc['host']['cpu_count']} cores.",
            "",
            "| side | timers | woken once | twice+ | never | p50 late (s) | p95 | p99 | max |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            "`tether`: the worker's wake_due over the sharded index (timers_take.lua); `naive`: "
            "one sorted set, ZRANGEBYSCORE then ZREM per member to claim it. Both pause until the "
            "next due time (at most the period) and register the same continuation runs with "
            "the same submit script.",
            "",
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
