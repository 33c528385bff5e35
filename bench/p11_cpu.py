"""Where P11's Tether side spends CPU: seconds per sample of every process, and the wall time.

    python -m bench.p11_cpu --cases 200 --epochs 3 --warm 40
    python -m bench.p11_cpu --workers 1 --worker-concurrency 4   # another worker setup
    python -m bench.p11_cpu --inspect                            # Inspect's side too

Starts what P11 starts (a private Redis, moto, the test OpenAI server, the P11 workers, a
producer in this process), warms the workers' pool children with ``--warm`` cases (their first
run imports the model SDK and botocore), then runs the batch of :mod:`bench.eval_p11` and prints
one JSON line per trial: wall time, load average, and the CPU milliseconds per sample of the
producer (this process alone), each worker (its pool children included), moto, redis-server and
the OpenAI server. CPU per sample moves far less with the machine's load than wall time, so
it is the figure to compare changes by on a shared machine. ``--inspect`` then runs Inspect's
side (:mod:`bench.inspect_side`) and prints its CPU per sample (its import included) too.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from bench.eval_p11 import (
    QUEUE,
    answer_by_default,
    inspect_command,
    judged_batch,
    producer_settings,
    worker_env,
    write_cases,
)
from bench.stack import BUCKET, bench_env, cpu_s, s3_client, start_moto, stop_process_group
from tests.support.openai_fixture import OpenAIServer, start_openai_server
from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerProcess
from tether.producer.client import Producer


def _inspect(args: argparse.Namespace, server: OpenAIServer, folder: Path) -> dict[str, object]:
    """Inspect's side in its own process; its CPU (import included) per sample."""
    log_dir = folder / f"inspect-{secrets.token_hex(4)}"
    argv, env = inspect_command(args.cases, args.epochs, args.concurrency, log_dir, server)
    server_before = cpu_s(server.process.pid)
    proc = psutil.Popen(argv, stdout=subprocess.PIPE, env=env)
    used_s = 0.0
    while proc.poll() is None:  # a process's times are gone once it is reaped
        used_s = max(used_s, cpu_s(proc.pid))
        time.sleep(0.2)
    assert proc.stdout is not None
    doc = json.loads(proc.stdout.read().decode().strip().splitlines()[-1])
    samples = args.cases * args.epochs
    return {
        "side": "inspect",
        "wall_s": round(doc["wall_s"], 2),
        "ms_per_sample": round(1000 * doc["wall_s"] / samples, 2),
        "cpu_ms_per_sample_with_import": round(1000 * used_s / samples, 2),
        "openai_server_cpu_ms_per_sample": round(
            1000 * (cpu_s(server.process.pid) - server_before) / samples, 2
        ),
        "correct": doc["correct"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.p11_cpu", description=__doc__)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker-concurrency", type=int, default=1)
    parser.add_argument("--pool", default="prefork")
    parser.add_argument("--warm", type=int, default=40, help="cases run before timing")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--inspect", action="store_true", help="run Inspect's side after each")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="p11cpu-"))
    redis = RedisServer(unix_socket=False).start()
    moto, endpoint = start_moto(folder)
    server = start_openai_server("sk-p11-" + secrets.token_hex(8))
    workers: list[WorkerProcess] = []
    producer: Producer | None = None
    try:
        s3_client(endpoint).create_bucket(Bucket=BUCKET)
        answer_by_default(server)
        env = {**bench_env(redis.url, endpoint), **worker_env(server)}
        workers = [
            WorkerProcess(
                f"p11cpu{i + 1}",
                env,
                folder,
                concurrency=args.worker_concurrency,
                pool=args.pool,
                queue=QUEUE,
            )
            for i in range(args.workers)
        ]
        for worker in workers:
            worker.start(wait=False)
        for worker in workers:
            worker.wait_ready(120.0)
        producer = Producer(producer_settings(redis.url, endpoint, server))
        named = {"moto": moto.pid, "redis": redis.pid, "openai": server.process.pid}
        named.update({f"worker{i + 1}": w.pid for i, w in enumerate(workers)})
        pids = {name: pid for name, pid in named.items() if pid is not None}
        if args.warm:
            warm = write_cases(folder / "warm.jsonl", args.warm, prefix="w")
            judged_batch(
                producer, warm, folder / "warm.results.jsonl", "p11cpu-warm", 1, args.concurrency
            )
        cases = write_cases(folder / "cases.jsonl", args.cases)
        samples = args.cases * args.epochs
        for n in range(args.trials):
            before = {name: cpu_s(pid) for name, pid in pids.items()}
            mine = cpu_s(os.getpid(), children=False)
            load = os.getloadavg()[0]
            started = time.perf_counter()
            batch_id = f"p11cpu-{secrets.token_hex(4)}"
            out = folder / f"t{n}.jsonl"
            summary = judged_batch(producer, cases, out, batch_id, args.epochs, args.concurrency)
            passed = summary.passed
            wall_s = time.perf_counter() - started
            cpu = {"producer": cpu_s(os.getpid(), children=False) - mine}
            cpu.update({name: cpu_s(pids[name]) - was for name, was in before.items()})
            per_sample = {name: round(1000 * s / samples, 2) for name, s in cpu.items()}
            doc = {
                "side": "tether",
                "wall_s": round(wall_s, 2),
                "ms_per_sample": round(1000 * wall_s / samples, 2),
                "load_1m": load,
                "passed": passed,
                "cpu_ms_per_sample": per_sample,
                "cpu_ms_per_sample_total": round(sum(per_sample.values()), 2),
            }
            print(json.dumps(doc), flush=True)
            if args.inspect:
                print(json.dumps(_inspect(args, server, folder)), flush=True)
    finally:
        if producer is not None:
            producer.close()
        for worker in workers:
            worker.stop()
        server.close()
        stop_process_group(moto)
        redis.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
