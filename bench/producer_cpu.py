"""One producer process for P9: submit N echo runs, wait for every result, print its CPU time.

    python -m bench.producer_cpu --runs 250 --tag abc123 --index 0

Settings come from the environment (:func:`bench.stack.bench_env`). Prints one JSON line:
``{"runs": N, "cpu_s": user+system seconds of this process, "wall_s": ...}``.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

from tether.producer import Producer
from tether.producer.submission import RunSpec
from tether.settings import load_settings


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--index", type=int, required=True)
    args = parser.parse_args()
    with Producer(load_settings()) as producer:
        warm = producer.run_async(f"{args.tag}-warm-{args.index}", "warm", agent="echo")
        warm.result(timeout=120)
        specs = [
            RunSpec(f"{args.tag}-p9-{args.index}-{i % 25}", f"hi {i}", "echo")
            for i in range(args.runs)
        ]
        cpu0, wall0 = _cpu_s(), time.monotonic()
        handles = producer.submit_many(specs)
        for handle in handles:
            handle.result(timeout=600)
        cpu_s, wall_s = _cpu_s() - cpu0, time.monotonic() - wall0
    print(json.dumps({"runs": args.runs, "cpu_s": cpu_s, "wall_s": wall_s}), flush=True)


if __name__ == "__main__":
    main()
