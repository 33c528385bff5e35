"""Counting what a run costs: Redis commands, S3 requests, and lines in worker logs.

Redis numbers come from ``INFO commandstats`` (every client, commands inside Lua scripts
included); S3 numbers from moto's request log (one line per request). Both are approximate
(idle workers poll Redis too) and serve the profile, never a target.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bench.core import Bench

_S3_LINE = re.compile(r'"(?:\x1b\[[0-9;]*m)?(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP')


def _s3_kind(method: str, path: str) -> str:
    if method == "GET" and ("list-type=" in path or "prefix=" in path):
        return "LIST"
    if "/events/" in path:
        return f"{method} segment"
    if path.endswith("/head.json"):
        return f"{method} head"
    return f"{method} object"


def _redis_calls(client: Any) -> dict[str, int]:
    stats = client.info("commandstats")
    return {str(k).removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def count_requests(bench: Bench, runs: int, one: Callable[[int], object]) -> dict[str, float]:
    """Redis commands (all clients: producer, workers, idle polling) and S3 requests per run
    while ``one(i)`` runs ``runs`` times in a row; approximate, for the profile, not a target."""
    client = bench.stack.redis.client()
    try:
        log = bench.stack.moto_log
        offset = log.stat().st_size
        before = _redis_calls(client)
        for i in range(runs):
            one(i)
        after = _redis_calls(client)
        with log.open("rb") as handle:
            handle.seek(offset)
            lines = handle.read().decode(errors="replace").splitlines()
    finally:
        client.close()
    out: dict[str, float] = {}
    redis_total = 0
    for name, calls in after.items():
        delta = calls - before.get(name, 0)
        if delta > 0 and name != "info":
            redis_total += delta
            out[f"redis {name}"] = round(delta / runs, 2)
    out["redis commands"] = round(redis_total / runs, 2)
    s3_total = 0
    for line in lines:
        match = _S3_LINE.search(line)
        if match and "/moto-api" not in match.group(2):
            s3_total += 1
            key = f"s3 {_s3_kind(match.group(1), match.group(2))}"
            out[key] = out.get(key, 0) + 1 / runs
    out["s3 requests"] = round(s3_total / runs, 2)
    return {k: round(v, 2) for k, v in sorted(out.items())}


def log_sizes(bench: Bench) -> list[int]:
    """The current sizes of the Tether workers' logs (offsets for :func:`count_in_logs`)."""
    return [w.log_path.stat().st_size for w in bench.stack.tether.workers]


def count_in_logs(bench: Bench, offsets: list[int], pattern: str) -> int:
    """Matches of ``pattern`` in the Tether workers' logs after ``offsets``."""
    found = 0
    for worker, offset in zip(bench.stack.tether.workers, offsets, strict=True):
        with worker.log_path.open("rb") as handle:
            handle.seek(offset)
            found += len(re.findall(pattern, handle.read().decode(errors="replace")))
    return found
