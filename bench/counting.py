"""Counting what a run costs: Redis commands, S3 requests, and lines in worker logs.

Redis numbers come from ``INFO commandstats`` (every client, commands inside Lua scripts
included) and from ``MONITOR`` (commands clients *sent*: a script call counts once, the commands
it runs inside the server do not); S3 numbers from moto's request log (one line per request).
All are approximate (idle workers poll Redis too: the sweeper, heartbeats, the broker's BRPOP)
and serve the profile.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import Counter
from collections.abc import Callable
from importlib import resources
from typing import Any

import redis

from bench.core import Bench
from tether.persistence.lua import load
from tether.runs.queue.record import record_script


def script_names() -> dict[str, str]:
    """Every script's SHA1, as clients call it, -> its file's name (the ones with run-record
    tables loaded with them): MONITOR shows a script call by its SHA1."""
    names: dict[str, str] = {}
    for entry in resources.files("tether.persistence.lua").iterdir():
        if not entry.name.endswith(".lua"):
            continue
        name = entry.name.removesuffix(".lua")
        text = entry.read_text()
        script = record_script(name) if "@tables" in text else load(name)
        names[hashlib.sha1(script.source.encode()).hexdigest()] = name
    return names


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


_MONITOR_LINE = re.compile(r'^\d+\.\d+ \[\d+ (\S+)\] "([^"]+)"')


def _background(text: str) -> bool:
    """A command of a worker's periodic duties (the sweeper's scan of the active shards, the
    presence heartbeat), not of a run."""
    return "{~workers}" in text or ('"ZRANGEBYSCORE"' in text and "{~active:" in text)


def count_sent(
    bench: Bench, runs: int, one: Callable[[int], object], namespace: str = "tether"
) -> dict[str, float]:
    """Redis commands *sent by clients* per run while ``one(i)`` runs ``runs`` times in a row
    (``MONITOR``: a script call counts once, what it does inside the server is not counted).

    ``sent tether commands``: those naming a key of Tether's ``namespace`` (the broker's keys
    have their own prefix), without the workers' periodic sweeps and heartbeats."""
    counts: Counter[str] = Counter()
    own: Counter[str] = Counter()
    marker = f'"{namespace}:'
    stop = threading.Event()
    monitor_client = redis.Redis.from_url(bench.stack.redis_url)
    ready = threading.Event()

    def watch() -> None:
        with monitor_client.monitor() as monitor:  # type: ignore[no-untyped-call]
            ready.set()
            connection = monitor.connection
            assert connection is not None
            while not stop.is_set():
                try:
                    line = connection.read_response(timeout=0.2)
                except (redis.TimeoutError, TimeoutError):
                    continue
                if line is None:
                    continue
                text = line.decode(errors="replace") if isinstance(line, bytes) else str(line)
                match = _MONITOR_LINE.match(text)
                if match and match.group(1) != "lua":
                    counts[match.group(2).lower()] += 1
                    if marker in text and not _background(text):
                        own[match.group(2).lower()] += 1

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        for i in range(runs):
            one(i)
    finally:
        stop.set()
        thread.join(timeout=5)
        monitor_client.close()
    counts.pop("monitor", None)
    out = {f"sent {name}": round(n / runs, 2) for name, n in counts.most_common()}
    out["sent commands"] = round(sum(counts.values()) / runs, 2)
    out |= {f"sent tether {name}": round(n / runs, 2) for name, n in own.most_common()}
    out["sent tether commands"] = round(sum(own.values()) / runs, 2)
    return out
