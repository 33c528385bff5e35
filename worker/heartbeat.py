"""The worker's presence heartbeat (see :mod:`tether.runs.presence`), beside the sweeper.

Started from the worker's main process once it consumes (``worker_ready``) and stopped, with its
record withdrawn, on shutdown. What it reports comes from Celery's own bookkeeping in the main
process (``celery.worker.state``), so pool children need no extra channel: queues consumed,
run messages finished, and the run ids of the run messages being executed.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from celery.signals import worker_ready, worker_shutdown
from celery.worker import state

from tether.errors import TetherError
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.runs.contract import RUN_TASK
from tether.runs.presence import Heartbeat, WorkerPresence, worker_id_for
from tether.settings import load_settings

log = logging.getLogger(__name__)

_heartbeat: Heartbeat | None = None


class _Snapshot:
    """Builds the presence record from the consumer and Celery's worker state."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self._node = str(getattr(consumer, "hostname", "") or "celery@?")
        self._hostname = self._node.partition("@")[2] or os.uname().nodename
        self._pid = os.getpid()
        self._started_at_ms = int(time.time() * 1000)

    def __call__(self) -> WorkerPresence:
        active = _active_requests()
        running = [_run_id(r) for r in active if getattr(r, "name", None) == RUN_TASK]
        return WorkerPresence(
            worker_id=worker_id_for(self._hostname, self._pid),
            node=self._node,
            hostname=self._hostname,
            pid=self._pid,
            queues=self._queues(),
            concurrency=_concurrency(self._consumer),
            started_at_ms=self._started_at_ms,
            last_seen_ms=0,
            runs_done=max(0, state.total_count.get(RUN_TASK, 0) - len(running)),
            current_runs=tuple(sorted(r for r in running if r)),
            busy=len(active),
        )

    def _queues(self) -> tuple[str, ...]:
        queues = self._consumer.app.amqp.queues
        return tuple(sorted(queues.consume_from or queues))


def _active_requests() -> list[Any]:
    # the set changes under us as tasks start and end in the consumer thread: copy, retrying
    for _ in range(5):
        try:
            return list(state.active_requests)
        except RuntimeError:
            continue
    return []


def _run_id(request: Any) -> str:
    kwargs = getattr(request, "kwargs", None) or {}
    doc = kwargs.get("request") if isinstance(kwargs, dict) else None
    run_id = doc.get("run_id") if isinstance(doc, dict) else None
    return run_id if isinstance(run_id, str) else ""


def _concurrency(consumer: Any) -> int | None:
    controller = getattr(consumer, "controller", None)
    value = getattr(controller, "concurrency", None)
    return value if isinstance(value, int) else None


def _start_heartbeat(sender: Any = None, **_: Any) -> None:
    global _heartbeat
    try:
        settings = load_settings()
        client = redis_from_url(settings.effective_redis_url)
        beat = Heartbeat(client, RedisKeys(settings.namespace), _Snapshot(sender))
        _heartbeat = beat.start()
    except TetherError as exc:
        log.error("presence heartbeat not started: %s", exc)


def _stop_heartbeat(**_: Any) -> None:
    if _heartbeat is not None:
        _heartbeat.stop()


# connected by call, not as decorators: Celery's are untyped
worker_ready.connect(_start_heartbeat, weak=False)
worker_shutdown.connect(_stop_heartbeat, weak=False)
