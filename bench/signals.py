"""P17: a signal sent -> the waiting run's next model call starts, against a fresh run's
submit -> first model call, side by side on the same workers.

    python -m bench.signals            # 200 of each (~2 min on 2 cores)
    python -m bench.signals --quick    # 20 of each: a smoke run (numbers mean little)

A private redis-server and moto S3 (over HTTP), 2 prefork workers (one pool process each) with
production defaults, the scripted agent of :mod:`bench.signal_agents` (it notes when each model
call starts, in Redis). Alternately:

- **fresh**: ``producer.run_async(session, "fresh KEY")``; the time from just before the call
  to the start of the run's (only) model call;
- **fresh, existing session**: the same on one session that has run before (its head cached):
  the stricter baseline, reported beside;
- **signal**: a run ``listen KEY`` parked on ``ctx.wait_for_signal("go")`` (the run ended
  ``WAITING``, no worker holds it); then ``producer.signal(session, "go", payload)``; the time
  from just before the call to the start of the next model call of the session (the wake is
  submitted by the signal itself, registered, claimed, restores the head, settles the call from
  the mailbox, and calls the model).

Target (issue #48): the signal's median <= 1.2 x the fresh run's (both ratios are reported).
Results: ``bench/results/p17.json`` and ``p17.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from bench.core import percentile
from bench.private_stack import private_redis_and_s3
from bench.report import command_line, host_info, now_iso
from bench.stack import BUCKET, bench_env, bench_settings

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_RATIO = 1.2
QUEUE = "p17"
AGENT_MODULE = "bench.signal_agents"


def stats_ms(samples: list[float]) -> dict[str, float]:
    """Median, p95 and mean of ``samples`` (seconds) in milliseconds."""
    ms = [s * 1000 for s in samples]
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 2),
        "p95_ms": round(percentile(ms, 95), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
    }


def _next_call(client: redis.Redis, key: str) -> float:
    """When the next model call noted under ``key`` started (blocks up to 60 s)."""
    popped = client.blpop([f"p17:calls:{key}"], timeout=60)
    if popped is None:
        raise RuntimeError(f"no model call under {key} within 60 s")
    return float(popped[1])


def measure(runs: int, warmup: int, log_dir: Path) -> dict[str, Any]:
    """The two latencies, alternating, through 2 workers."""
    from tether.core.results import RunStatus
    from tether.dev.workers import WorkerFleet
    from tether.producer.client import Producer

    fresh: list[float] = []
    warm: list[float] = []
    signalled: list[float] = []
    with private_redis_and_s3(BUCKET, "p17-") as (redis_url, s3_endpoint):
        env = bench_env(redis_url, s3_endpoint, queue=QUEUE)
        env["TETHER_AGENT_MODULES"] = json.dumps([AGENT_MODULE])
        settings = bench_settings(redis_url, s3_endpoint, queue=QUEUE)
        settings = settings.model_copy(update={"agent_modules": [AGENT_MODULE]})
        client = redis.Redis.from_url(redis_url)
        with (
            WorkerFleet(env, log_dir, count=2, queue=QUEUE, prefix="p17"),
            Producer(settings) as producer,
        ):
            for i in range(warmup + runs):
                key = f"f{i}"
                started = time.time()
                producer.run_async(f"fresh-{i}", f"fresh {key}", agent="p17")
                took = _next_call(client, key) - started
                if i >= warmup:
                    fresh.append(took)
                key = f"w{i}"  # a fresh run of a session that exists (its head cached)
                started = time.time()
                producer.run_async("warm", f"fresh {key}", agent="p17")
                took = _next_call(client, key) - started
                if i >= warmup:
                    warm.append(took)
                key = f"s{i}"
                parked = producer.run(f"sig-{i}", f"listen {key}", agent="p17", wait_s=60)
                if parked.status is not RunStatus.WAITING:
                    raise RuntimeError(f"run {i} did not park: {parked.status} {parked.error}")
                _next_call(client, key)  # the parked run's own first call
                started = time.time()
                sent = producer.signal(f"sig-{i}", "go", {"n": i})
                if sent.woke_run_id is None:
                    raise RuntimeError(f"signal {i} woke nothing")
                took = _next_call(client, key) - started
                if i >= warmup:
                    signalled.append(took)
        client.close()
    return {"fresh": stats_ms(fresh), "warm": stats_ms(warm), "signal": stats_ms(signalled)}


def table(result: dict[str, Any]) -> str:
    """The markdown table of ``result``."""
    rows = ["| path | median | p95 | mean | n |", "|---|---|---|---|---|"]
    for what, part in (
        ("fresh run, new session: submit -> first model call", result["fresh"]),
        ("fresh run, existing session: submit -> first model call", result["warm"]),
        ("signal -> the waiting run's next model call", result["signal"]),
    ):
        rows.append(
            f"| {what} | {part['median_ms']} ms | {part['p95_ms']} ms | {part['mean_ms']} ms "
            f"| {part['n']} |"
        )
    met = "met" if result["ratio"] <= TARGET_RATIO else "NOT met"
    rows.append(
        f"\nRatio of the medians, signal / fresh run of a new session: {result['ratio']:.2f} "
        f"(target <= {TARGET_RATIO}: {met}); signal / fresh run of an existing session: "
        f"{result['ratio_warm']:.2f}."
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.signals", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="20 of each: a smoke run")
    parser.add_argument("--runs", type=int, default=None, help="of each path (default 200)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where p17.json and .md go")
    args = parser.parse_args(argv)
    runs = args.runs or (20 if args.quick else 200)
    warmup = 3 if args.quick else 20
    started = time.monotonic()
    result: dict[str, Any] = {
        "measure": "P17",
        "command": command_line(argv, module="bench.signals"),
        "when": now_iso(),
        "runs_each": runs,
        "warmup_each": warmup,
        **measure(runs, warmup, Path(tempfile.mkdtemp(prefix="p17-"))),
        "machine": host_info(("celery", "redis")),
    }
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["ratio"] = round(result["signal"]["median_ms"] / result["fresh"]["median_ms"], 3)
    result["ratio_warm"] = round(result["signal"]["median_ms"] / result["warm"]["median_ms"], 3)
    result["targets"] = {
        "ratio": {"target": f"<= {TARGET_RATIO}", "met": result["ratio"] <= TARGET_RATIO}
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = "p17-quick" if args.quick else "p17"
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    title = f"# P17: a signal wakes a waiting run\n\n`{result['command']}`, {result['when']}"
    machine = result["machine"]
    notes = (
        f"2 prefork workers (one pool process each), a private redis-server and moto S3 over "
        f"HTTP; {machine['cpu_count']} cores, load average {machine['load_average_1m_end']} "
        f"at the end; commit {machine['git_commit']}; {runs} of each after {warmup} warm-up, "
        "alternating.\n\nThe fresh run of a new session creates it (its head is looked up in "
        "S3 and not found); the woken run restores a head the parking worker just wrote (the "
        "head cache holds it), as a fresh run of an existing session does. Each includes the "
        "producer's call and the broker hop."
    )
    (args.out / f"{name}.md").write_text(f"{title}\n\n{notes}\n\n{table(result)}\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
