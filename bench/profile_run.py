"""Where a 1-step echo run spends the worker's time: cProfile over in-process drains on a
private redis-server and moto (S3 over HTTP, its own process), the worker's own code path.

    python -m bench.profile_run            # 300 runs, cumulative and self-time tables
    python -m bench.profile_run --runs 50

Prints ms per run, then how the profiled time splits between S3 requests (botocore), Redis
commands (redis-py) and the rest, then the top functions. The runtime is a Celery worker's
(:func:`bench.private_stack.production_runtime`), each run driven as the ``tether.run`` task
drives it (submit, then a drain carrying the request).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time

from bench.private_stack import private_redis_and_s3, production_runtime
from tether.runs.contract import RunRequest
from tether.runs.queue.base import submit
from tether.worker.engine.claim import Carried
from tether.worker.engine.cycle import drain

BUCKET = "profile-bucket"


def _cumulative(stats: pstats.Stats, name_part: str, func: str) -> float:
    """Cumulative seconds of the first profiled function named ``func`` in a file containing
    ``name_part`` (0 when absent)."""
    for (filename, _line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        if name_part in filename and name == func:
            return float(row[3])
    return 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_run", description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args(argv)
    with private_redis_and_s3(BUCKET, "tether-profile-") as (redis_url, endpoint):
        rt = production_runtime(redis_url, endpoint, BUCKET)

        def one(i: int) -> None:
            request = RunRequest(
                run_id=f"run-{i}", request_id=f"req-{i}", tenant="t", session_id=f"s-{i % 10}",
                agent="echo", input="hello",
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
        stats.sort_stats("cumulative").print_stats(25)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
