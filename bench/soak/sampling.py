"""The samples: Redis memory, key count, the census of the keys by kind and each worker's RSS,
taken at the checkpoints (:func:`take_sample`) and lighter every few seconds (:class:`Sampler`)."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.soak.config import NAMESPACE
from bench.soak.stack import SoakStack
from bench.soak.workload import Tracker
from bench.stack import pool_children, rss_kib
from tether.dev.workers import WorkerProcess
from tether.persistence.redis_conn import redis_from_url


@dataclass
class KindCensus:
    """The keys of one kind at a checkpoint."""

    keys: int = 0
    bytes: int = 0
    entries: int = 0
    """Stream entries (XLEN) for stream kinds, else 0."""


@dataclass
class Sample:
    """One checkpoint's figures."""

    label: str
    runs_done: int
    elapsed_s: float
    used_memory: int
    used_memory_dataset: int
    mem_clients_normal: int
    """Client buffers (part of ``used_memory``, not of the data): pipelines in flight."""
    keys: int
    worker_rss_kib: dict[str, int]
    census: dict[str, KindCensus] = field(default_factory=dict)

    @property
    def runs_per_s(self) -> float:
        return self.runs_done / self.elapsed_s if self.elapsed_s > 0 else 0.0


#: Kinds whose keys are streams (their entries are counted).
STREAM_KINDS = ("events", "{~done:*}", "{~p:*}:done")
_ID_RE = re.compile(r"[0-9a-f]{8,}(-[0-9a-f]{4,})*|\d+")


def key_kind(key: str, namespace: str = NAMESPACE) -> str:
    """The kind of a key: a session key's suffix after its hash tag (``events``, ``meta``,
    ``run``, ``req``...), a namespace-wide key's tag (``{~done:*}``, ``{~active:*}``...), or
    ``broker:<name>`` for Celery's keys (ids replaced by ``*``)."""
    celery = f"{namespace}-celery:"
    if key.startswith(celery):
        return "broker:" + _ID_RE.sub("*", key[len(celery) :])
    if not key.startswith(namespace + ":{"):
        return "other:" + _ID_RE.sub("*", key.split(":", 1)[0])
    start = len(namespace) + 2
    end = key.find("}", start)
    tag, suffix = key[start:end], key[end + 2 :]
    if tag == "~done" or tag.startswith("~done:"):
        return "{~done:*}"
    if tag.startswith("~p:"):
        return "{~p:*}:done"
    if tag.startswith("~active:"):
        return "{~active:*}"
    if tag == "~workers":
        return "{~workers}:*" if suffix else "{~workers}"
    if "/~runs:" in tag:
        return "{t/~runs:*} run index"
    return suffix.split(":", 1)[0] or "(no suffix)"


def census(client: Any) -> dict[str, KindCensus]:
    """Every key by kind, with its MEMORY USAGE and (streams) XLEN, via SCAN."""
    kinds: dict[str, KindCensus] = {}
    batch: list[bytes] = []

    def flush() -> None:
        pipe = client.pipeline(transaction=False)
        names = [k.decode() for k in batch]
        for name in names:
            pipe.memory_usage(name, samples=0)
            if key_kind(name) in STREAM_KINDS:
                pipe.xlen(name)
        replies = iter(pipe.execute(raise_on_error=False))
        for name in names:
            kind = kinds.setdefault(key_kind(name), KindCensus())
            used = next(replies)
            kind.keys += 1
            kind.bytes += used if isinstance(used, int) else 0  # expired meanwhile: None
            if key_kind(name) in STREAM_KINDS:
                length = next(replies)
                kind.entries += length if isinstance(length, int) else 0
        batch.clear()

    for key in client.scan_iter(count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            flush()
    if batch:
        flush()
    return dict(sorted(kinds.items()))


def worker_rss(workers: Sequence[WorkerProcess]) -> dict[str, int]:
    """Each running worker's RSS in KiB: its main process plus its pool children."""
    out: dict[str, int] = {}
    for worker in workers:
        pid = worker.pid
        if pid is None or not worker.alive():
            continue
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, Exception):
            out[worker.name] = rss_kib(pid) + sum(rss_kib(c) for c in pool_children(pid))
    return out


def take_sample(
    stack: SoakStack, label: str, runs_done: int, started: float, *, with_census: bool
) -> Sample:
    client = redis_from_url(stack.redis.url)
    try:
        info = client.info("memory")
        keys = int(client.dbsize())
        kinds = census(client) if with_census else {}
    finally:
        client.close()
    return Sample(
        label=label,
        runs_done=runs_done,
        elapsed_s=round(time.monotonic() - started, 1),
        used_memory=int(info["used_memory"]),
        used_memory_dataset=int(info["used_memory_dataset"]),
        mem_clients_normal=int(info.get("mem_clients_normal", 0)),
        keys=keys,
        worker_rss_kib=worker_rss(stack.workers),
        census=kinds,
    )


class Sampler(threading.Thread):
    """The light sample (memory, keys, RSS) every ``every_s``."""

    def __init__(self, stack: SoakStack, tracker: Tracker, every_s: float, started: float) -> None:
        super().__init__(name="soak-sampler", daemon=True)
        self.stack, self.tracker, self.every_s, self.started = stack, tracker, every_s, started
        self.stop = threading.Event()
        self.samples: list[Sample] = []

    def run(self) -> None:
        while self.every_s > 0 and not self.stop.wait(self.every_s):
            with contextlib.suppress(Exception):  # a sample lost to a busy moment is no harm
                self.samples.append(
                    take_sample(
                        self.stack, "t", self.tracker.completed, self.started, with_census=False
                    )
                )
