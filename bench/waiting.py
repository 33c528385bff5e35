"""P15 (the timer half): 10,000 runs asleep on timers while 2 workers run: the worker slots they
hold, the Redis memory each costs, and the workers' CPU while all of them wait; beside the same
idle fleet without them, and runs that completed without waiting, measured in the same run.

    python -m bench.waiting               # the issue's size: 10,000 sleeping runs
    python -m bench.waiting --quick       # 500 (a smoke run)

A private redis-server and moto S3. The runs (agent ``sleeper`` of :mod:`bench.agents`: one tool
call that sleeps an hour with ``ctx.sleep``) are applied in this process by the worker's own
engine on the same Redis and store (submit, drain: the run ends ``WAITING`` and parks its call),
so their cost in Redis is what a worker leaves. Two Celery workers (one pool process each, the
production sweep period) run the whole time; their sweepers and timers threads see every parked
call.

- **Slots held**: the workers' presence records (their runs in flight), sampled every second.
- **Redis bytes per waiting run**: ``INFO memory`` ``used_memory`` after the runs minus before,
  over the runs; and the part of it that is the wait itself (the wait records and the timers
  index, by ``MEMORY USAGE``). Beside it, the same for runs of the same session shape that
  completed without waiting (the ``echo`` demo agent).
- **Worker CPU while all wait**: CPU time of the two worker process trees over a window, as a
  share of one core; beside it, the same window of the same workers before any run existed.

Results: ``bench/results/p15-timers.json`` and ``p15-timers.md``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import redis

from bench.private_stack import private_redis_and_s3
from bench.report import host_info, now_iso
from bench.stack import BUCKET, bench_env, bench_settings
from tether.dev.workers import WorkerFleet
from tether.keys import RedisKeys
from tether.runs.contract import RunRequest
from tether.runs.presence import list_workers
from tether.runs.queue.base import submit
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices, build_services

RESULTS = Path(__file__).resolve().parent / "results"
QUEUE = "p15"
WINDOW_S = 30.0
TARGET_BYTES = 2048
TARGET_CPU_PCT = 2.0


def _apply(services: EngineServices, agent: str, text: str, n: int, tag: str) -> None:
    sid = f"{tag}-{n}"
    request = RunRequest(
        run_id=f"run-{sid}", request_id=f"req-{sid}", session_id=sid, agent=agent, input=text
    )
    submit(services.runs, request)
    drain(services, request.tenant, sid)


def _apply_many(services: EngineServices, agent: str, text: str, count: int, tag: str) -> float:
    """Apply ``count`` runs on sessions of their own (4 threads); the wall time."""
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda n: _apply(services, agent, text, n, tag), range(count)))
    return time.monotonic() - started


def _used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def _wait_bytes(client: redis.Redis, keys: RedisKeys, tag: str, count: int) -> int:
    """The bytes of the wait records and the timers index (``MEMORY USAGE``)."""
    pipe = client.pipeline(transaction=False)
    for n in range(count):
        pipe.memory_usage(keys.session_waits("default", f"{tag}-{n}"), samples=0)
    for shard in keys.timer_shards():
        pipe.memory_usage(shard, samples=0)
    return sum(int(v or 0) for v in pipe.execute())


def _cpu_s(fleet: WorkerFleet) -> float:
    """CPU time (user + system) of every process of the fleet's workers so far."""
    total = 0.0
    for worker in fleet.workers:
        if worker.pid is None:
            continue
        root = psutil.Process(worker.pid)
        for proc in [root, *root.children(recursive=True)]:
            try:
                times = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
    return total


def _watch(client: redis.Redis, keys: RedisKeys, fleet: WorkerFleet) -> dict[str, Any]:
    """Over :data:`WINDOW_S`: the fleet's CPU share of one core, the most slots held."""
    held = 0
    cpu_before, started = _cpu_s(fleet), time.monotonic()
    while time.monotonic() - started < WINDOW_S:
        held = max(held, sum(len(w.current_runs) for w in list_workers(client, keys)))
        time.sleep(1.0)
    elapsed = time.monotonic() - started
    cpu_pct = 100 * (_cpu_s(fleet) - cpu_before) / elapsed
    return {"window_s": round(elapsed, 1), "cpu_pct_of_core": round(cpu_pct, 2), "slots_held": held}


def measure(count: int) -> dict[str, Any]:
    with private_redis_and_s3(BUCKET, "p15-") as (redis_url, s3):
        settings = bench_settings(redis_url, s3, queue=QUEUE)
        client = redis.Redis.from_url(redis_url)
        keys = RedisKeys(settings.namespace)
        services = build_services(lambda tenant, session_id: None, settings)
        fleet = WorkerFleet(
            bench_env(redis_url, s3, queue=QUEUE),
            Path(tempfile.mkdtemp(prefix="p15-")),
            count=2,
            queue=QUEUE,
            prefix="p15",
        )
        fleet.start()
        try:
            idle = _watch(client, keys, fleet)
            before = _used(client)
            sleep_wall_s = _apply_many(services, "sleeper", "nap 3600", count, "nap")
            asleep = _used(client)
            waiting = _watch(client, keys, fleet)
            wait_only = _wait_bytes(client, keys, "nap", count)
            done_count = min(count, 1000)
            done_before = _used(client)
            _apply_many(services, "echo", "hello", done_count, "echo")
            done_after = _used(client)
            timed = services.waits.counts()["timers"] if services.waits is not None else 0
        finally:
            fleet.stop()
    return {
        "sleeping_runs": count,
        "parked_in_index": timed,
        "apply_wall_s": round(sleep_wall_s, 1),
        "redis_bytes_per_waiting_run": round((asleep - before) / count),
        "wait_bytes_per_waiting_run": round(wait_only / count),
        "completed_runs": done_count,
        "redis_bytes_per_completed_run": round((done_after - done_before) / done_count),
        "idle_fleet": idle,
        "fleet_while_all_wait": waiting,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.waiting", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=None)
    args = parser.parse_args(argv)
    count = args.runs or (500 if args.quick else 10_000)
    doc = {
        "benchmark": "P15 (timer half): runs asleep on timers",
        "when": now_iso(),
        "command": "python -m bench.waiting"
        + (" --quick" if args.quick else "")
        + (f" --runs {args.runs}" if args.runs else ""),
        "target": f"0 slots held; <= {TARGET_BYTES} Redis bytes per waiting run; worker CPU "
        f"<= {TARGET_CPU_PCT}% of a core while all wait",
        "result": measure(count),
        "host": host_info(["redis", "celery"]),
    }
    name = "p15-timers-quick" if args.quick else "p15-timers"
    if args.runs:
        name = f"p15-timers-{count}"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(_markdown(doc))
    print(_markdown(doc))
    return 0


def _markdown(doc: dict[str, Any]) -> str:
    r = doc["result"]
    idle, busy = r["idle_fleet"], r["fleet_while_all_wait"]
    return "\n".join(
        [
            f"# P15 (timer half): runs asleep on timers ({doc['when']})",
            "",
            f"`{doc['command']}`. Target: {doc['target']}. Load at the end: "
            f"{doc['host']['load_average_1m_end']} on {doc['host']['cpu_count']} cores.",
            "",
            "| measure | while all wait | baseline |",
            "|---|---|---|",
            f"| sleeping runs (parked in the timers index) | {r['sleeping_runs']:,} "
            f"({r['parked_in_index']:,}) | - |",
            f"| worker slots held (max over {busy['window_s']} s) | {busy['slots_held']} | "
            f"{idle['slots_held']} (idle fleet) |",
            f"| worker CPU, % of one core (2 workers) | {busy['cpu_pct_of_core']} | "
            f"{idle['cpu_pct_of_core']} (same fleet, no run) |",
            "| Redis bytes per run (INFO used_memory delta) | "
            f"{r['redis_bytes_per_waiting_run']:,} "
            f"| {r['redis_bytes_per_completed_run']:,} (a completed 1-step run, "
            f"{r['completed_runs']:,} of them) |",
            f"| of which the wait (record + timers index) | {r['wait_bytes_per_waiting_run']:,} "
            "| - |",
            "",
            f"Applying the {r['sleeping_runs']:,} runs took {r['apply_wall_s']} s in this process "
            "(4 threads, moto S3 over HTTP).",
            "",
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
