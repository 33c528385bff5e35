"""The worker's presence heartbeat (see :mod:`tether.runs.presence`), beside the sweeper.

Started from the worker's main process once it consumes (``worker_ready``) and stopped, with its
record withdrawn, on shutdown. What it reports comes from Celery's own bookkeeping in the main
process (``celery.worker.state``), so pool children need no extra channel: queues consumed,
run messages finished, and the run ids of the run messages and canvas runs being executed.
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
from tether.runs.contract import CANVAS_RUN_TASK, RUN_TASK, canvas_run_id
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
        run_messages = sum(1 for r in active if getattr(r, "name", None) == RUN_TASK)
        running = {run_id for run_id in map(_run_id, active) if run_id}
        return WorkerPresence(
            worker_id=worker_id_for(self._hostname, self._pid),
            node=self._node,
            hostname=self._hostname,
            pid=self._pid,
            queues=self._queues(),
            concurrency=_concurrency(self._consumer),
            started_at_ms=self._started_at_ms,
            last_seen_ms=0,
            # Celery counts a task when it starts: the run messages still executing are not done
            runs_done=max(0, state.total_count.get(RUN_TASK, 0) - run_messages),
            current_runs=tuple(sorted(running)),
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
    """The run a task executes, from its task id: ``""`` for a task that names no run.

    Not from the message body: a run message's request is JSON text (a whole request, or a
    wake-up of its ids with TETHER_REGISTERED_RUNS_ONLY), which would be parsed, input and all,
    at every heartbeat; the producer sends every run message with task id = run id, and a
    canvas run's id is derived from its task id. A drain (``tether.drain``) names no run: it
    applies whatever its session has queued.
    """
    task_id = getattr(request, "id", None)
    if not isinstance(task_id, str) or not task_id:
        return ""
    name = getattr(request, "name", None)
    if name == RUN_TASK:
        return task_id
    if name == CANVAS_RUN_TASK:
        return canvas_run_id(task_id)
    return ""


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
