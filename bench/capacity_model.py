"""``python -m bench.capacity_model``: what one run costs, measured on real parts, for the
capacity model of ``docs/capacity.md``.

    python -m bench.capacity_model                  # 1,000 runs over 100 sessions per workload
    python -m bench.capacity_model --runs 200 --sessions 20     # smaller (10 runs a session)

writes ``bench/results/capacity.json``, then the model (:mod:`bench.capacity_report`) writes
``capacity.md`` from it. The stack is the benchmark's own
(:func:`bench.stack.start_stack`: a private redis-server that is both the broker and Tether's
state, moto's S3 server in its own process, real Celery workers with one pool child each) with
production defaults; two workloads run on it, one after the other, each on sessions of its own:

- ``echo``: a 1-step run with no model (Tether's own cost);
- ``assistant``: the built-in assistant, one model call over HTTP to the test OpenAI server (the
  ``openai`` SDK's cost included, as with a real provider).

For each, over the whole workload (submit until every result is back, then 1 s for the workers'
last writes), minus what the idle stack did in the same time (measured for ``IDLE_S`` before):

- Redis: commands executed (``INFO commandstats``: every client, the commands scripts run
  included, the broker's too), bytes in and out (``total_net_input_bytes`` / ``output``), the
  server's CPU seconds (``used_cpu_user`` + ``used_cpu_sys``);
- S3: requests by kind (moto's request log: one line each);
- worker CPU: user + system seconds of every worker process (the main processes and their pool
  children, from ``/proc``);
- producer CPU: this process's user + system seconds while it submits and waits.

Then, at the end, the resident state: every Redis key with ``MEMORY USAGE`` and its TTL, grouped
by kind (ids replaced by placeholders), and every S3 object's size, grouped by kind (heads,
event segments, other).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import resource
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench import capacity_report
from bench.counting import _S3_LINE, _s3_kind
from bench.report import dump_json, host_info, now_iso
from bench.stack import (
    BUCKET,
    STORE_PREFIX,
    BenchStack,
    bench_settings,
    pool_children,
    rss_kib,
    s3_client,
)
from bench.stack import start_stack as start_bench_stack
from tests.support.openai_fixture import OpenAIServer, start_openai_server
from tether.core.results import RunStatus
from tether.producer.client import Producer
from tether.producer.submission import RunSpec

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
NAME = "capacity"
PACKAGES = ("celery", "redis", "boto3", "moto", "openai")
#: seconds the idle stack is watched before the workloads (its background rate is subtracted)
IDLE_S = 10.0
RESULT_TIMEOUT_S = 600.0
MODEL = "test-model"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Counters:
    """What the stack had done at one instant (cumulative counters)."""

    at_s: float
    redis_commands: int
    redis_in_bytes: int
    redis_out_bytes: int
    redis_cpu_s: float
    worker_cpu_s: float
    producer_cpu_s: float
    moto_log_offset: int

    def minus(self, earlier: Counters) -> dict[str, float]:
        """The change since ``earlier``, with the seconds it took."""
        return {
            "seconds": self.at_s - earlier.at_s,
            "redis_commands": self.redis_commands - earlier.redis_commands,
            "redis_in_bytes": self.redis_in_bytes - earlier.redis_in_bytes,
            "redis_out_bytes": self.redis_out_bytes - earlier.redis_out_bytes,
            "redis_cpu_s": self.redis_cpu_s - earlier.redis_cpu_s,
            "worker_cpu_s": self.worker_cpu_s - earlier.worker_cpu_s,
            "producer_cpu_s": self.producer_cpu_s - earlier.producer_cpu_s,
        }


def _proc_cpu_s(pid: int) -> float:
    """User + system seconds of one process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def _worker_pids(stack: BenchStack) -> list[int]:
    mains = [w.pid for w in stack.tether.workers if w.pid is not None]
    return [*mains, *(child for pid in mains for child in pool_children(pid))]


def _self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def counters(stack: BenchStack, client: redis.Redis) -> Counters:
    """The stack's cumulative counters now."""
    stats = client.info("commandstats")
    commands = sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")
    info = client.info()
    return Counters(
        at_s=time.monotonic(),
        redis_commands=commands,
        redis_in_bytes=int(info["total_net_input_bytes"]),
        redis_out_bytes=int(info["total_net_output_bytes"]),
        redis_cpu_s=float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
        worker_cpu_s=sum(_proc_cpu_s(pid) for pid in _worker_pids(stack)),
        producer_cpu_s=_self_cpu_s(),
        moto_log_offset=stack.moto_log.stat().st_size,
    )


def s3_requests(stack: BenchStack, start: int, end: int) -> dict[str, int]:
    """S3 requests by kind in moto's log between two offsets."""
    with stack.moto_log.open("rb") as handle:
        handle.seek(start)
        text = handle.read(end - start).decode(errors="replace")
    kinds: dict[str, int] = {}
    for line in text.splitlines():
        match = _S3_LINE.search(line)
        if match and "/moto-api" not in match.group(2):
            kind = _s3_kind(match.group(1), match.group(2))
            kinds[kind] = kinds.get(kind, 0) + 1
    return dict(sorted(kinds.items()))


def run_workload(producer: Producer, agent: str, prefix: str, runs: int, sessions: int) -> None:
    """``runs`` runs of ``agent`` over ``sessions`` sessions, all submitted at once; every one
    must complete."""
    specs = [RunSpec(f"{prefix}-{i % sessions}", f"hello {i}", agent) for i in range(runs)]
    handles = producer.submit_many(specs)
    for handle in handles:
        result = handle.result(timeout=RESULT_TIMEOUT_S)
        if result.status is not RunStatus.COMPLETED:
            raise RuntimeError(f"{agent} run {handle.run_id}: {result.status} {result}")


def measure_workload(
    stack: BenchStack,
    client: redis.Redis,
    idle: dict[str, float],
    work: Callable[[], None],
    runs: int,
) -> dict[str, Any]:
    """Per-run costs of ``work`` (``runs`` runs), the idle rate taken off."""
    before = counters(stack, client)
    work()
    time.sleep(1.0)  # the workers' last writes after the results (archive, release)
    after = counters(stack, client)
    delta = after.minus(before)
    seconds = delta["seconds"]
    per_run: dict[str, Any] = {"seconds": round(seconds, 2), "runs": runs}
    for name, value in delta.items():
        if name == "seconds":
            continue
        background = idle.get(name, 0.0) * seconds if name != "producer_cpu_s" else 0.0
        per_run[name] = value / runs
        per_run[name + "_net_of_idle"] = (value - background) / runs
    requests = s3_requests(stack, before.moto_log_offset, after.moto_log_offset)
    per_run["s3_requests"] = {k: v / runs for k, v in requests.items()}
    per_run["s3_requests_total"] = sum(requests.values()) / runs
    return per_run


def idle_rates(stack: BenchStack, client: redis.Redis) -> dict[str, float]:
    """What the idle stack does per second (workers' heartbeats, sweeps, the broker's polls)."""
    before = counters(stack, client)
    time.sleep(IDLE_S)
    delta = counters(stack, client).minus(before)
    return {k: v / delta["seconds"] for k, v in delta.items() if k != "seconds"}


_ID_PARTS = (
    (re.compile(r"\{~p:([^}/]+)/[^}]+\}"), r"{~p:\1/<producer>}"),
    (re.compile(r"\{([^}/~]+)/~runs:\d+\}"), r"{\1/~runs:<n>}"),
    (re.compile(r"\{([^}/~]+)/[^}~]+\}"), r"{\1/<session>}"),
    (re.compile(r"\{~active:\d+\}"), "{~active:<n>}"),
    (re.compile(r"\{~done:\d+\}"), "{~done:<n>}"),  # the namespace feed, once sharded
    (re.compile(r"\{~usage/[^}]+\}:\d{8}"), "{~usage/<tenant>}:<day>"),
    (re.compile(r"\{~workers\}:.+"), "{~workers}:<worker>"),
    (re.compile(r"(run|req|p)[-_][0-9A-Za-z]{6,}"), r"<\1>"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f-]{27}"), "<uuid>"),
)


def key_kind(key: str) -> str:
    """A key with its ids replaced by placeholders (one kind per line of the census)."""
    for pattern, repl in _ID_PARTS:
        key = pattern.sub(repl, key)
    return key


def redis_census(client: redis.Redis) -> dict[str, dict[str, float]]:
    """Every key's ``MEMORY USAGE``, grouped by kind: count, bytes, how many have a TTL and the
    longest TTL left (about the TTL set, for keys written in the last seconds)."""
    kinds: dict[str, dict[str, float]] = {}
    for raw in client.scan_iter(count=1000):
        key = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        size = client.memory_usage(raw, samples=0) or 0
        ttl = int(client.pttl(raw))
        row = kinds.setdefault(
            key_kind(key), {"keys": 0, "bytes": 0, "with_ttl": 0, "max_ttl_s": 0.0}
        )
        row["keys"] += 1
        row["bytes"] += size
        row["with_ttl"] += 1 if ttl >= 0 else 0
        row["max_ttl_s"] = max(row["max_ttl_s"], ttl / 1000)
    return dict(sorted(kinds.items(), key=lambda kv: -kv[1]["bytes"]))


def s3_census(endpoint: str) -> dict[str, dict[str, float]]:
    """Every object's size, grouped by kind (head, event segment, other)."""
    client = s3_client(endpoint)
    kinds: dict[str, dict[str, float]] = {}
    for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix=STORE_PREFIX
    ):
        for obj in page.get("Contents", []):
            key = obj["Key"]
            kind = "head" if key.endswith("head.json") else "segment" if "/events/" in key else None
            kind = kind or "other: " + key_kind(key.rsplit("/", 1)[-1])
            row = kinds.setdefault(kind, {"objects": 0, "bytes": 0})
            row["objects"] += 1
            row["bytes"] += int(obj["Size"])
    return kinds


def _producer(stack: BenchStack, server: OpenAIServer) -> Producer:
    return Producer(
        bench_settings(
            stack.redis_url,
            stack.s3_endpoint,
            openai_base_url=server.base_url,
            openai_api_key=server.api_key,
            openai_model=MODEL,
            openai_api="chat",
        )
    )


def measure(runs: int, sessions: int, workers: int, log_dir: Path) -> dict[str, Any]:
    """Start the stack, watch it idle, run both workloads, take the census."""
    server = start_openai_server("sk-cap-" + secrets.token_hex(8))
    server.default_reply("the answer")
    openai_env = {
        "TETHER_OPENAI_BASE_URL": server.base_url,
        "TETHER_OPENAI_API_KEY": server.api_key,
        "TETHER_OPENAI_MODEL": MODEL,
        "TETHER_OPENAI_API": "chat",
    }
    stack = start_bench_stack(
        log_dir, tether_workers=workers, baseline_workers=0, env_extra=openai_env
    )
    client = redis.Redis.from_url(stack.redis_url)
    producer = _producer(stack, server)
    try:
        run_workload(producer, "echo", "cap-warm", 20, 4)  # connections, scripts, imports
        idle = idle_rates(stack, client)
        out: dict[str, Any] = {"idle_per_s": idle, "workloads": {}}
        for agent in ("echo", "assistant"):
            server.reset()
            server.default_reply("the answer")
            out["workloads"][agent] = measure_workload(
                stack,
                client,
                idle,
                functools.partial(run_workload, producer, agent, f"cap-{agent}", runs, sessions),
                runs,
            )
        out["worker_rss_mib"] = {
            "main": [rss_kib(w.pid) / 1024 for w in stack.tether.workers if w.pid is not None],
            "pool_child": [
                rss_kib(child) / 1024
                for w in stack.tether.workers
                if w.pid is not None
                for child in pool_children(w.pid)
            ],
        }
        info = client.info("memory")
        out["redis_used_memory_bytes"] = int(info["used_memory"])
        out["redis_census"] = redis_census(client)
        out["s3_census"] = s3_census(stack.s3_endpoint)
        out["runs_total"] = 2 * runs + 20
        out["sessions_total"] = 2 * sessions + 4
        out["settings"] = stack.settings.model_dump(
            include={"result_ttl_s", "stream_max_len", "stream_retention_s", "head_cache_ttl_s"}
        )
        return out
    finally:
        producer.close()
        client.close()
        stack.close()
        server.close()


def main(argv: list[str] | None = None) -> int:
    """Measure, write ``capacity.json`` / ``capacity.md``, print the markdown."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.capacity_model", description=__doc__)
    parser.add_argument("--runs", type=int, default=1000, help="runs per workload")
    parser.add_argument("--sessions", type=int, default=100, help="sessions per workload")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (-c 1 each)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    load_start = round(os.getloadavg()[0], 2)
    started = time.monotonic()
    log_dir = Path(tempfile.mkdtemp(prefix="tether-capacity-"))
    measured = measure(args.runs, args.sessions, args.workers, log_dir)
    meta = {
        "date": now_iso(),
        "command": " ".join(["python -m bench.capacity_model", *argv]),
        "sizes": {"runs": args.runs, "sessions": args.sessions, "workers": args.workers},
        "duration_s": round(time.monotonic() - started, 1),
        "load_average_1m_start": load_start,
        "uptime": Path("/proc/loadavg").read_text().strip(),
        "machine": host_info(PACKAGES, redis_server="bench stack"),
    }
    document = {**meta, "measured": measured}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{NAME}.json").write_text(dump_json(document))
    return capacity_report.main(["--results", str(args.out)])


if __name__ == "__main__":
    raise SystemExit(main())
