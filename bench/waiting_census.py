"""The Redis census of P15 (:mod:`bench.waiting`): every key's ``MEMORY USAGE``, by who owns it
(the runs of one half, by their session ids' prefix, or the namespace) and by kind
(:func:`bench.capacity_model.key_kind`), with each session's total for its median and p95.

A ``--bigkeys``-style pass over the private bench Redis: a full ``SCAN`` (which also drops keys
whose TTL ran out, so what is counted is what lives), ``MEMORY USAGE ... SAMPLES 0`` pipelined.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import redis

from bench.capacity_model import key_kind
from bench.core import percentile

_SESSION = re.compile(r"\{[^}/~]+/([^}~]+)\}")
_RUN_INDEX = re.compile(r"/~runs:\d+\}:run-(.+)$")
_BENCH_ID = re.compile(r"\b(run|req)-[a-z]+-\d+")
PAGE = 1000


def owner(key: str, tags: Sequence[str]) -> str:
    """Which half owns ``key`` (a tag in ``tags``: its sessions' ids start ``<tag>-``), or
    ``shared`` (the namespace's and the tenant's indexes, feeds and fleet keys)."""
    found = _SESSION.search(key) or _RUN_INDEX.search(key)
    if found is not None:
        session = found.group(1)
        for tag in tags:
            if session.startswith(f"{tag}-"):
                return tag
    return "shared"


def kind_of(key: str) -> str:
    """The key's kind: its ids (the bench's ``run-<tag>-<n>`` too) replaced by placeholders."""
    return _BENCH_ID.sub(r"<\1>", key_kind(key))


def _sizes(client: redis.Redis, keys: list[bytes]) -> list[int]:
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key, samples=0)
    return [int(size or 0) for size in pipe.execute()]


def _pages(client: redis.Redis) -> Iterable[list[bytes]]:
    page: list[bytes] = []
    for raw in client.scan_iter(count=PAGE):
        page.append(raw)
        if len(page) >= PAGE:
            yield page
            page = []
    if page:
        yield page


def census(client: redis.Redis, tags: Sequence[str]) -> dict[str, Any]:
    """``{owner: {"kinds": {kind: {keys, bytes}}, "bytes": total, "sessions": {id: bytes}}}``."""
    out: dict[str, Any] = {}
    for page in _pages(client):
        for raw, size in zip(page, _sizes(client, page), strict=True):
            key = raw.decode(errors="replace")
            who = owner(key, tags)
            row = out.setdefault(who, {"kinds": {}, "bytes": 0, "sessions": {}})
            kind = row["kinds"].setdefault(kind_of(key), {"keys": 0, "bytes": 0})
            kind["keys"] += 1
            kind["bytes"] += size
            row["bytes"] += size
            if who != "shared":
                found = _SESSION.search(key) or _RUN_INDEX.search(key)
                assert found is not None
                session = found.group(1)
                row["sessions"][session] = row["sessions"].get(session, 0) + size
    return out


def per_run(row: dict[str, Any], runs: int) -> dict[str, Any]:
    """One half's census per run: bytes by kind, and the median and p95 of a session's total
    (its run's own keys, the run-id index entry included)."""
    totals = list(row["sessions"].values())
    kinds = sorted(row["kinds"].items(), key=lambda kv: -kv[1]["bytes"])
    return {
        "runs": runs,
        "bytes_per_run": round(row["bytes"] / runs),
        "session_bytes_median": round(statistics.median(totals)) if totals else 0,
        "session_bytes_p95": round(percentile(totals, 95)) if totals else 0,
        "kinds": {
            k: {"keys": v["keys"], "bytes_per_run": round(v["bytes"] / runs)} for k, v in kinds
        },
    }
