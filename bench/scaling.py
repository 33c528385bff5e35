"""The scaling curve: runs/s for 1, 2 and 4 worker processes, and for the session state on one
Redis vs a 3-master Redis Cluster (4 workers). Feeds ``bench/SCALING.md``.

    python -m bench.scaling                 # 600 runs per point (~5 min on 2 cores)
    python -m bench.scaling --runs 100      # a quick look

Each point starts its own stack: a private redis-server (the broker, and the state store for
the single-Redis points), moto (S3 over HTTP), N single-child prefork Tether workers, and for the
cluster point a 3-master Redis Cluster as ``TETHER_REDIS_URL``. One producer submits the runs
(echo, over runs/4 sessions) with ``submit_many`` and waits for every result; the figure is runs
over the wall time from the submit to the last result. Writes ``bench/results/scaling.json``
and ``scaling.md`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from bench.stack import BUCKET, bench_env, bench_settings, s3_client, start_moto, stop_process_group
from tether.dev.redis_cluster import RedisClusterProcesses
from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerFleet
from tether.producer import Producer
from tether.producer.submission import RunSpec

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


@contextlib.contextmanager
def _stack(log_dir: Path, workers: int, shards: int) -> Iterator[Producer]:
    log_dir.mkdir(parents=True, exist_ok=True)
    redis_server = RedisServer(unix_socket=False).start()
    cluster = RedisClusterProcesses(shards) if shards > 1 else None
    moto = None
    fleet = None
    producer = None
    try:
        if cluster is not None:
            cluster.start()
        moto, endpoint = start_moto(log_dir)
        s3_client(endpoint).create_bucket(Bucket=BUCKET)
        env = bench_env(redis_server.url, endpoint)
        settings = bench_settings(redis_server.url, endpoint)
        if cluster is not None:
            env["TETHER_REDIS_URL"] = cluster.url
            settings = settings.model_copy(update={"redis_url": cluster.url})
        fleet = WorkerFleet(env, log_dir, count=workers, prefix=f"w{workers}s{shards}")
        fleet.start()
        producer = Producer(settings)
        yield producer
    finally:
        if producer is not None:
            producer.close()
        if fleet is not None:
            fleet.stop()
        if moto is not None:
            stop_process_group(moto)
        if cluster is not None:
            cluster.close()
        redis_server.close()


def _point(log_dir: Path, workers: int, shards: int, runs: int) -> dict[str, float]:
    tag = uuid.uuid4().hex[:6]
    sessions = max(1, runs // 4)
    with _stack(log_dir, workers, shards) as producer:
        warm = producer.submit_many([RunSpec(f"{tag}-warm-{i}", "w", "echo") for i in range(8)])
        for handle in warm:
            handle.result(timeout=120)
        specs = [RunSpec(f"{tag}-{i % sessions}", f"hi {i}", "echo") for i in range(runs)]
        start = time.monotonic()
        handles = producer.submit_many(specs)
        for handle in handles:
            handle.result(timeout=900)
        wall_s = time.monotonic() - start
    return {
        "workers": workers,
        "shards": shards,
        "runs": runs,
        "wall_s": round(wall_s, 2),
        "runs_per_s": round(runs / wall_s, 1),
    }


def plot(points: list[dict[str, float]], path: Path, command: str) -> None:
    """Runs/s per worker count (one Redis), and the 3-shard cluster point beside its twin."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    single = [p for p in points if p["shards"] == 1]
    cluster = [p for p in points if p["shards"] > 1]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot([p["workers"] for p in single], [p["runs_per_s"] for p in single], "o-",
            label="state on one Redis")  # fmt: skip
    if cluster:
        ax.plot([p["workers"] for p in cluster], [p["runs_per_s"] for p in cluster], "s",
                markersize=9, label="state on a 3-master Redis Cluster")  # fmt: skip
    ax.set_xlabel("worker processes (one pool child each)")
    ax.set_ylabel("runs/s (echo, 1 step)")
    ax.set_xticks([p["workers"] for p in single])
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(f"{os.cpu_count()} CPUs; {command}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__)
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    log_dir = Path(tempfile.mkdtemp(prefix="tether-scaling-"))
    plan = [(1, 1), (2, 1), (4, 1), (4, 3)]
    points = []
    for workers, shards in plan:
        point = _point(log_dir / f"w{workers}-s{shards}", workers, shards, args.runs)
        print(json.dumps(point), flush=True)
        points.append(point)
    command = f"python -m bench.scaling --runs {args.runs}"
    doc = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "machine": f"{os.cpu_count()} CPUs, {platform.platform()}",
        "points": points,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = [
        f"Date: {doc['date']} · command: `{doc['command']}` · {doc['machine']}",
        "",
        "| worker processes | Redis shards (state) | runs | wall (s) | runs/s |",
        "|---|---|---|---|---|",
        *(
            f"| {p['workers']} | {p['shards']} | {p['runs']} | {p['wall_s']} | {p['runs_per_s']} |"
            for p in points
        ),
    ]
    (args.out / "scaling.md").write_text("\n".join(lines) + "\n")
    plot(points, args.out / "scaling.png", command)
    print(f"wrote {args.out / 'scaling.md'} and scaling.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
