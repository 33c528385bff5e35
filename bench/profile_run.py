"""Where a 1-step echo run spends the worker's time: cProfile over in-process drains on a
private redis-server and moto (S3 over HTTP, its own process), the worker's own code path.

    python -m bench.profile_run            # 300 runs, cumulative and self-time tables
    python -m bench.profile_run --runs 50
    python -m bench.profile_run --durable  # P21's run: steps10, durability="step", a Redis on
                                           # appendfsync always and a file:// store (one disk)

Prints ms per run, then how the profiled time splits between S3 requests (botocore), Redis
commands (redis-py) and the rest, then the Redis commands per run by kind (scripts by name),
then the top functions. The runtime is a Celery worker's
(:func:`bench.private_stack.production_runtime`), each run driven as the ``tether.run`` task
drives it (submit, then a drain carrying the request).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.counting import script_names
from bench.private_stack import private_redis_and_s3, production_runtime
from tether.dev.redis_server import RedisServer
from tether.persistence.redis_conn import redis_from_url
from tether.runs.contract import RunRequest
from tether.runs.queue.base import submit
from tether.settings import Settings
from tether.worker.engine.claim import Carried
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices, build_services

BUCKET = "profile-bucket"


def _cumulative(stats: pstats.Stats, name_part: str, func: str) -> float:
    """Cumulative seconds of the first profiled function named ``func`` in a file containing
    ``name_part`` (0 when absent)."""
    for (filename, _line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        if name_part in filename and name == func:
            return float(row[3])
    return 0.0


@contextlib.contextmanager
def durable_runtime() -> Iterator[EngineServices]:
    """A worker's runtime on P21's durable configuration: a private Redis with ``appendonly
    yes`` + ``appendfsync always`` and a ``file://`` store, both in one temporary directory."""
    data_dir = Path(tempfile.mkdtemp(prefix="tether-profile-durable-"))
    config = {"appendonly": "yes", "appendfsync": "always", "dir": str(data_dir)}
    server = RedisServer(unix_socket=False, extra_config=config).start()
    try:
        settings = Settings(
            redis_url=server.url,
            broker_url=server.url,
            store_url=f"file://{data_dir / 'store'}",
            agent_modules=["bench.agents"],
        )
        yield build_services(lambda tenant, session_id: None, settings)
    finally:
        server.close()
        shutil.rmtree(data_dir, ignore_errors=True)


@contextlib.contextmanager
def s3_runtime() -> Iterator[EngineServices]:
    """A worker's runtime on a private Redis (no persistence) and moto S3."""
    with private_redis_and_s3(BUCKET, "tether-profile-") as (redis_url, endpoint):
        yield production_runtime(redis_url, endpoint, BUCKET)


def commands_per_run(rt: EngineServices, one: Callable[[int], None], start: int, n: int) -> None:
    """Run ``n`` more runs under MONITOR and print the commands sent per run, by kind."""
    url = rt.settings.effective_redis_url
    names, seen = script_names(), collections.Counter[str]()
    with redis_from_url(url).monitor() as monitor:
        for i in range(start, start + n):
            one(i)
        redis_from_url(url).ping()  # the last command MONITOR shows: the end of the read
        for event in monitor.listen():
            command = str(event["command"])
            if command == "PING":
                break
            if event.get("client_type") == "lua":
                continue  # a script's own calls: counted as the script
            word, _, rest = command.partition(" ")
            if word == "EVALSHA":
                word = (
                    f"script {names.get(rest.split(' ')[0], 'with tables (submit, claim, finish)')}"
                )
            seen[word] += 1
    print(f"Redis commands sent per run ({n} runs): {sum(seen.values()) / n:.1f}")
    for kind, count in seen.most_common():
        print(f"  {count / n:5.1f}  {kind}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_run", description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--durable", action="store_true", help="P21's durable 10-step run")
    args = parser.parse_args(argv)
    agent, durability = ("steps10", "step") if args.durable else ("echo", None)
    with durable_runtime() if args.durable else s3_runtime() as rt:

        def one(i: int) -> None:
            request = RunRequest(
                run_id=f"run-{i}", request_id=f"req-{i}", tenant="t", session_id=f"s-{i % 10}",
                agent=agent, input="hello", durability=durability,
            )  # fmt: skip
            submit(rt.runs, request, on=rt.settings.queue)
            drain(rt, "t", request.session_id, carried=Carried(request, rt.settings.queue))

        for i in range(30):  # warm-up: connections, scripts, imports
            one(i)
        profile = cProfile.Profile()
        started = time.perf_counter()
        profile.enable()
        for i in range(30, 30 + args.runs):
            one(i)
        profile.disable()
        per_run_ms = (time.perf_counter() - started) / args.runs * 1000
        stats = pstats.Stats(profile, stream=sys.stdout)
        total = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
        s3 = _cumulative(stats, "botocore/client.py", "_make_api_call")
        redis_s = _cumulative(stats, "redis/client.py", "_execute_command")
        redis_s += _cumulative(stats, "redis/client.py", "_execute_transaction")
        redis_s += _cumulative(stats, "redis/client.py", "_execute_pipeline")
        print(f"{per_run_ms:.1f} ms per run (profiled) over {args.runs} runs")
        print(f"S3 requests (botocore): {s3 / total:.0%} of profiled time")
        print(f"Redis commands (redis-py): {redis_s / total:.0%}")
        print(f"everything else (Tether, pydantic, JSON): {(total - s3 - redis_s) / total:.0%}")
        commands_per_run(rt, one, 30 + args.runs, 5)
        stats.sort_stats("cumulative").print_stats(25)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
