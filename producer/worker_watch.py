"""No silent hangs: warn when a run waits on a queue that no live worker consumes.

While a caller waits for a run, :func:`watch_for_workers` checks every :data:`POLL_S` (after a
grace of :data:`GRACE_S`, so a run that finishes within it costs no Redis read) whether the run
is still queued and whether any live worker (see :mod:`tether.runs.presence`) consumes its
queue. If none does, it warns once, within about :data:`GRACE_S` + :data:`POLL_S` seconds of
the submission::

    no worker is consuming queue `tether` on redis://127.0.0.1:6379/0: start one with
    `tether worker` or `tether up`

The warning goes to the ``tether.producer`` logger by default (printed on stderr when logging is
not configured); the CLI passes its own callback. It never fails the wait: the run stays queued
and starts as soon as a worker comes.

The watch here is a thread (for :class:`~tether.producer.client.Producer`); its asyncio twin,
:mod:`tether.producer.worker_watch_aio`, is a task of the event loop. What both decide (how a
wait is split around the grace, when a run still waits in a queue, the warning) is written once
here, in the functions without I/O.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

import redis

from tether.errors import TetherError
from tether.keys import RedisKeys
from tether.runs.presence import WorkerPresence, list_workers
from tether.runs.queue.base import RunState, RunView
from tether.settings import Settings
from tether.settings.checks import mask_url

log = logging.getLogger("tether.producer")

GRACE_S = 1.0
POLL_S = 1.0

Warn = Callable[[str], None]


class WatchedProducer(Protocol):
    """What the watch uses of the producer (:class:`~tether.producer.client.Producer`)."""

    @property
    def settings(self) -> Settings:
        """The producer's settings (its queue and broker)."""

    @property
    def redis(self) -> redis.Redis:
        """The producer's Redis client."""

    @property
    def keys(self) -> RedisKeys:
        """The key schema."""

    def record(self, run_id: str, *, tenant: str | None = None) -> RunView | None:
        """The record of run ``run_id`` of ``tenant``, or None."""


def no_worker_message(queue: str, broker_url: str) -> str:
    """The warning for ``queue`` on ``broker_url`` (its password masked)."""
    return (
        f"no worker is consuming queue `{queue}` on {mask_url(broker_url)}: start one with "
        "`tether worker` or `tether up`"
    )


def split_wait(wait_s: float | None) -> tuple[float, float | None]:
    """A wait of ``wait_s`` (None: no limit) as ``(grace_s, rest_s)``: most runs end within
    the watch's grace, so a caller waits that long first and watches only during the rest
    (``rest_s`` 0: nothing is left; None: no limit). A run that ends within the grace then
    costs no watch (no thread or task to start, nor to join between the result and the
    caller)."""
    grace_s = GRACE_S if wait_s is None else min(wait_s, GRACE_S)
    return grace_s, None if wait_s is None else wait_s - grace_s


def queued_on(view: RunView | None, default_queue: str) -> str | None:
    """The queue a run waits in, from its record, or None once it started or ended."""
    if view is None or view.status != RunState.QUEUED:
        return None
    return view.queue or default_queue


def consuming(workers: list[WorkerPresence], queue: str) -> int:
    """How many of the live ``workers`` consume ``queue``."""
    return sum(1 for w in workers if queue in w.queues)


def live_consumers(producer: WatchedProducer, queue: str | None = None) -> int | None:
    """How many live workers consume ``queue`` (default: the producer's); None when Redis
    could not say."""
    try:
        queue = queue or producer.settings.queue
        return consuming(list_workers(producer.redis, producer.keys), queue)
    except TetherError:
        return None


def warn_if_unconsumed(
    producer: WatchedProducer, warn: Warn | None = None, *, queue: str | None = None
) -> bool:
    """Check once; warn and answer True when no live worker consumes ``queue`` (default: the
    producer's)."""
    queue = queue or producer.settings.queue
    if live_consumers(producer, queue) != 0:
        return False
    (warn or log.warning)(no_worker_message(queue, producer.settings.effective_broker_url))
    return True


class _Watch:
    def __init__(
        self,
        producer: WatchedProducer,
        run_id: str,
        warn: Warn | None,
        tenant: str | None,
        grace_s: float = GRACE_S,
    ) -> None:
        self._producer = producer
        self._grace_s = grace_s
        self._run_id = run_id
        self._tenant = tenant
        self._warn = warn
        self._stop = threading.Event()
        self.warned = False
        self._thread = threading.Thread(target=self._loop, name="tether-worker-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _queued_on(self) -> str | None:
        """The queue the run waits in, or None once it started or ended."""
        view = self._producer.record(self._run_id, tenant=self._tenant)
        return queued_on(view, self._producer.settings.queue)

    def _loop(self) -> None:
        if self._stop.wait(self._grace_s):
            return
        try:
            while (queue := self._queued_on()) is not None:
                if warn_if_unconsumed(self._producer, self._warn, queue=queue):
                    self.warned = True
                    return
                if self._stop.wait(POLL_S):
                    return
        except TetherError as exc:  # the wait itself reports Redis trouble
            log.debug("worker watch stopped: %s", exc)


@contextlib.contextmanager
def watch_for_workers(
    producer: WatchedProducer,
    run_id: str,
    *,
    warn: Warn | None = None,
    tenant: str | None = None,
    grace_s: float = GRACE_S,
) -> Iterator[None]:
    """Within the block, warn once if ``run_id`` stays queued with no live worker for its queue.

    Args:
        producer: the producer that submitted the run (its Redis, keys and queue are used).
        run_id: the run being waited for.
        warn: called with the warning (default: ``logging.getLogger("tether.producer").warning``).
        tenant: the run's tenant (default: the producer's).
        grace_s: how long the block runs before the first check (0: the caller already waited).
    """
    watch = _Watch(producer, run_id, warn, tenant, grace_s)
    watch.start()
    try:
        yield
    finally:
        watch.stop()
