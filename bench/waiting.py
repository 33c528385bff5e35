"""P15: 10,000 runs waiting on 2 workers, half on timers and half on signals: the worker slots
they hold, the Redis memory each costs, and the workers' CPU while all of them wait; beside the
same idle fleet without them, and runs that completed without waiting, measured in the same run.

    python -m bench.waiting               # the issue's size: 5,000 timer + 5,000 signal waits
    python -m bench.waiting --quick       # 500 (a smoke run)
    python -m bench.waiting --runs N      # N, half of each
    python -m bench.waiting --runs N --no-compact   # the baseline before the streams at rest
                                                    # gave their room back (same runs)
    python -m bench.waiting --runs N --redis-config hash-max-listpack-value=1024
                                                    # a server setting's effect (CONFIG SET)

A private redis-server and moto S3. The runs are applied in this process by the worker's own
engine on the same Redis and store (submit, drain: the run ends ``WAITING`` and parks its
call), so what they leave in Redis is what a worker leaves: agent ``sleeper`` of
:mod:`bench.agents` (one tool call that sleeps an hour with ``ctx.sleep``) and ``listener`` (one
tool call that waits up to an hour for a signal with ``ctx.wait_for_signal``). Two Celery
workers (one pool process each, the production sweep period) run the whole time; their
sweepers and timers threads see every parked call.

- **Slots held**: the workers' presence records (their runs in flight), sampled every second.
- **Redis bytes per waiting run**: the keyspace's growth (``MEMORY STATS``: the dataset and
  the keyspace's hash tables, without the clients' buffers and the server's own) after the runs
  minus before, over the runs, twice: just after they parked, and at rest, once the keys with a
  short TTL that every run refreshes (the head cache, ``TETHER_HEAD_CACHE_TTL_S``, and the
  delta channel, ``TETHER_DELTA_TTL_S``) are gone, as they are for a run that waits minutes or
  hours. At rest, a census (:mod:`bench.waiting_census`: ``MEMORY USAGE`` of every key) splits
  the bytes by the half that owns them and by kind, with the median and p95 of a session's
  total. Beside it, the same for runs of the same session shape that completed without
  waiting (the ``echo`` demo agent), measured the same way after the waiting runs.
- **Worker CPU while all wait**: CPU time of the two worker process trees over a window, as a
  share of one core; beside it, the same window of the same workers before any run existed.

Results: ``bench/results/p15.json`` and ``p15.md``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from bench.private_stack import private_redis_and_s3
from bench.report import command_line, host_info, now_iso
from bench.stack import BUCKET, bench_env, bench_settings, cpu_s
from bench.waiting_census import census, per_run
from bench.waiting_report import markdown
from tether.dev.workers import WorkerFleet
from tether.keys import RedisKeys
from tether.runs.contract import RunRequest
from tether.runs.presence import list_workers
from tether.runs.queue.base import submit
from tether.settings import Settings
from tether.worker.engine import cycle
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices, build_services

RESULTS = Path(__file__).resolve().parent / "results"
QUEUE = "p15"
WINDOW_S = 30.0
TARGET_BYTES = 2048
TARGET_CPU_PCT = 2.0
#: The two halves: (session id prefix, agent, input).
HALVES = (("nap", "sleeper", "nap 3600"), ("sig", "listener", "listen go"))
COMPLETED = ("echo", "echo", "hello")
#: Runs that complete without waiting, the baseline.
COMPLETED_RUNS = 1000


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
    """``used_memory`` less what is not the keyspace's: the clients' buffers (this process opens
    connections while it applies the runs) and the scripts' cache."""
    info = client.info("memory")
    return (
        int(info["used_memory"])
        - int(info["mem_clients_normal"])
        - int(info["used_memory_scripts_eval"])
    )


def _wait_bytes(client: redis.Redis, keys: RedisKeys, tag: str, count: int) -> int:
    """The bytes of one half's wait records (``MEMORY USAGE``)."""
    pipe = client.pipeline(transaction=False)
    for n in range(count):
        pipe.memory_usage(keys.session_waits("default", f"{tag}-{n}"), samples=0)
    return sum(int(v or 0) for v in pipe.execute())


def _index_bytes(client: redis.Redis, keys: RedisKeys) -> int:
    """The bytes of the timers index (every shard)."""
    pipe = client.pipeline(transaction=False)
    for shard in keys.timer_shards():
        pipe.memory_usage(shard, samples=0)
    return sum(int(v or 0) for v in pipe.execute())


def _cpu_s(fleet: WorkerFleet) -> float:
    """CPU time (user + system) of every process of the fleet's workers so far."""
    return sum(cpu_s(w.pid) for w in fleet.workers if w.pid is not None)


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


def _at_rest(settings: Settings, applied_at: float) -> None:
    """Wait until the short-lived keys the last run refreshed have expired."""
    ephemeral_s = max(settings.head_cache_ttl_s, settings.delta_ttl_s) + 5
    time.sleep(max(0.0, applied_at + ephemeral_s - time.monotonic()))


def _waiting_half(services: EngineServices, half: int) -> dict[str, float]:
    """Apply both halves of waiting runs; the wall time of each."""
    return {
        tag: round(_apply_many(services, agent, text, half, tag), 1) for tag, agent, text in HALVES
    }


def _completed(services: EngineServices, settings: Settings, client: redis.Redis) -> dict[str, Any]:
    """The baseline: runs that completed without waiting, just applied and at rest."""
    tag, agent, text = COMPLETED
    before = _used(client)
    wall_s = _apply_many(services, agent, text, COMPLETED_RUNS, tag)
    applied = _used(client)
    _at_rest(settings, time.monotonic())
    counted = census(client, [tag])
    return {
        "runs": COMPLETED_RUNS,
        "apply_wall_s": round(wall_s, 1),
        "info_bytes_per_run_just_applied": round((applied - before) / COMPLETED_RUNS),
        "info_bytes_per_run_at_rest": round((_used(client) - before) / COMPLETED_RUNS),
        "census": per_run(counted[tag], COMPLETED_RUNS),
    }


def measure(count: int, redis_config: dict[str, str]) -> dict[str, Any]:
    half = count // 2
    with private_redis_and_s3(BUCKET, "p15-") as (redis_url, s3):
        settings = bench_settings(redis_url, s3, queue=QUEUE)
        client = redis.Redis.from_url(redis_url)
        for name, value in redis_config.items():
            client.config_set(name, value)
        keys = RedisKeys(settings.namespace)
        services = build_services(lambda tenant, session_id: None, settings)
        env = bench_env(redis_url, s3, queue=QUEUE)
        fleet = WorkerFleet(
            env, Path(tempfile.mkdtemp(prefix="p15-")), count=2, queue=QUEUE, prefix="p15"
        )
        fleet.start()
        try:
            idle = _watch(client, keys, fleet)
            before = _used(client)
            walls = _waiting_half(services, half)
            applied_at = time.monotonic()
            parked = _used(client)
            waiting = _watch(client, keys, fleet)
            timed = services.waits.counts()["timers"] if services.waits is not None else 0
            waits = {tag: _wait_bytes(client, keys, tag, half) for tag, _, _ in HALVES}
            index = _index_bytes(client, keys)
            _at_rest(settings, applied_at)
            counted = census(client, [tag for tag, _, _ in HALVES])
            at_rest = _used(client)
            done = _completed(services, settings, client)
            redis_version = str(client.info("server")["redis_version"])
        finally:
            fleet.stop()
    return {
        "waiting_runs": 2 * half,
        "timer_runs": half,
        "signal_runs": half,
        "parked_in_timers_index": timed,
        "apply_wall_s": walls,
        "info_bytes_per_waiting_run_just_parked": round((parked - before) / (2 * half)),
        "info_bytes_per_waiting_run_at_rest": round((at_rest - before) / (2 * half)),
        "wait_bytes_per_run": {tag: round(b / half) for tag, b in waits.items()},
        "timers_index_bytes_per_run": round(index / (2 * half)),
        "census": {tag: per_run(counted[tag], half) for tag, _, _ in HALVES},
        "census_shared_bytes_per_run": round(counted["shared"]["bytes"] / (2 * half)),
        "completed": done,
        "idle_fleet": idle,
        "fleet_while_all_wait": waiting,
        "redis_server": redis_version,
        "redis_config": redis_config,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.waiting", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=None, help="waiting runs, half of each")
    parser.add_argument(
        "--no-compact",
        action="store_true",
        help="the runs applied here leave their session's stream as appended (the baseline)",
    )
    parser.add_argument(
        "--redis-config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the private redis-server (CONFIG SET before the runs; repeatable)",
    )
    args = parser.parse_args(argv)
    redis_config = dict(item.split("=", 1) for item in args.redis_config)
    if args.no_compact:  # the engine's call, as it was before it existed
        cycle._at_rest = lambda services, tenant, session_id: None
    count = args.runs or (500 if args.quick else 10_000)
    load_start = round(os.getloadavg()[0], 2)
    doc = {
        "benchmark": "P15: runs waiting, half on timers, half on signals",
        "when": now_iso(),
        "command": command_line(argv, module="bench.waiting"),
        "target": f"0 slots held; <= {TARGET_BYTES} Redis bytes per waiting run; worker CPU "
        f"<= {TARGET_CPU_PCT}% of a core while all wait",
        "result": measure(count, redis_config),
        "load_average_1m_start": load_start,
        "host": host_info(["redis", "celery"]),
    }
    name = "p15-quick" if args.quick else "p15"
    if args.runs:
        name = f"p15-{count}"
    if args.no_compact:
        name += "-no-compact"
    if redis_config:
        name += "-" + "-".join(f"{k}-{v}" for k, v in redis_config.items())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
