"""The workers a console shows, from their presence records in Redis
(:mod:`tether.runs.presence`): alive, what they run now, how fast they finish runs."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

from tether.producer.ops.console.backends import Backends
from tether.runs.presence import WorkerPresence, list_workers, queue_depth

#: runs/s is measured over the console's own samples of this window.
RATE_WINDOW_S = 60.0


@dataclass(frozen=True)
class WorkerRow:
    """One live worker (process group)."""

    worker_id: str
    node: str
    queues: tuple[str, ...]
    concurrency: int | None
    busy: int
    current_runs: tuple[str, ...]
    """Runs of this console's tenant it executes now."""
    other_runs: int
    """Runs of other tenants it executes now (not named: they are not this tenant's)."""
    runs_done: int
    runs_per_s: float
    uptime_s: float
    last_seen_s: float


class RateTracker:
    """runs/s per worker from successive ``runs_done`` samples (since start until a second
    sample exists)."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self._window_s = window_s
        self._samples: dict[str, deque[tuple[float, int]]] = {}
        self._lock = threading.Lock()

    def rate(self, worker: WorkerPresence, now_s: float | None = None) -> float:
        """Runs per second of ``worker`` (and remember this sample)."""
        now_s = time.monotonic() if now_s is None else now_s
        with self._lock:
            samples = self._samples.setdefault(worker.worker_id, deque())
            samples.append((now_s, worker.runs_done))
            while len(samples) > 2 and now_s - samples[1][0] >= self._window_s:
                samples.popleft()
            first_s, first_done = samples[0]
        if now_s - first_s >= 1.0:
            return max(0, worker.runs_done - first_done) / (now_s - first_s)
        uptime_s = max(1.0, (worker.last_seen_ms - worker.started_at_ms) / 1000)
        return worker.runs_done / uptime_s


def list_worker_rows(b: Backends, tenant: str, rates: RateTracker) -> list[WorkerRow]:
    """Every live worker, with only ``tenant``'s runs named."""
    workers = list_workers(b.client, b.keys)
    now_ms = int(time.time() * 1000)
    rows = []
    for worker in workers:
        mine = tuple(r for r in worker.current_runs if _is_tenants(b, tenant, r))
        rows.append(
            WorkerRow(
                worker_id=worker.worker_id,
                node=worker.node,
                queues=worker.queues,
                concurrency=worker.concurrency,
                busy=worker.busy,
                current_runs=mine,
                other_runs=len(worker.current_runs) - len(mine),
                runs_done=worker.runs_done,
                runs_per_s=rates.rate(worker),
                uptime_s=max(0.0, (now_ms - worker.started_at_ms) / 1000),
                last_seen_s=worker.age_s(now_ms),
            )
        )
    return rows


def _is_tenants(b: Backends, tenant: str, run_id: str) -> bool:
    return b.runs.locate(tenant, run_id) is not None


def broker_depth(b: Backends) -> dict[str, int] | None:
    """Messages waiting in the broker queue of the settings (Redis brokers only)."""
    settings = b.settings
    if not settings.effective_broker_url.startswith(("redis://", "rediss://", "unix://")):
        return None
    if settings.effective_broker_url != settings.effective_redis_url:
        return None  # another Redis: not worth a second connection for one number
    return queue_depth(b.client, settings.namespace, [settings.queue])
