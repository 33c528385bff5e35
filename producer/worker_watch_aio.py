"""No silent hangs for asyncio code: the twin of :mod:`tether.producer.worker_watch` for
:class:`~tether.producer.client_aio.AsyncProducer`, a task of the event loop instead of a thread,
deciding through the same functions (the grace, when a run still waits in a queue, who consumes
it, the warning). The watches of one producer share their reads of the live workers and a bound
on their reads in flight, so runs that outlast the grace together never hold the loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import AsyncIterator
from typing import Protocol, cast

import redis.asyncio

from tether.errors import TetherError
from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.producer.worker_watch import (
    GRACE_S,
    POLL_S,
    Warn,
    consuming,
    no_worker_message,
    queued_on,
)
from tether.runs.presence import WorkerPresence, presences, record_keys
from tether.runs.queue.base import RunView
from tether.settings import Settings

log = logging.getLogger("tether.producer")

#: Reads the watches of one producer have in flight at once. Runs submitted together outlast
#: the grace together: unbounded, their watches' replies came back in the same turns of the
#: event loop, which then held it for tens of milliseconds (``asyncio.gather`` over 200 runs).
READS_IN_FLIGHT = 8


class AsyncWatchedProducer(Protocol):
    """What the watch uses of the producer (:class:`~tether.producer.client_aio.AsyncProducer`)."""

    @property
    def settings(self) -> Settings:
        """The producer's settings (its queue and broker)."""

    @property
    def redis(self) -> redis.asyncio.Redis:
        """The producer's Redis client."""

    @property
    def keys(self) -> RedisKeys:
        """The key schema."""

    async def record(self, run_id: str, *, tenant: str | None = None) -> RunView | None:
        """The record of run ``run_id`` of ``tenant``, or None."""


async def _live_workers(producer: AsyncWatchedProducer) -> list[WorkerPresence]:
    """Every live worker (``list_workers`` on the asyncio client)."""
    client, keys = producer.redis, producer.keys
    with translate_errors(describe_client(client)):
        ids = cast("list[bytes]", await client.zrange(keys.workers(), 0, -1))
        docs = await client.mget(record_keys(keys, ids)) if ids else []
    return presences(cast("list[bytes | None]", docs))


async def async_live_consumers(
    producer: AsyncWatchedProducer, queue: str | None = None
) -> int | None:
    """How many live workers consume ``queue`` (default: the producer's); None when Redis
    could not say."""
    try:
        return consuming(await _live_workers(producer), queue or producer.settings.queue)
    except TetherError:
        return None


async def async_warn_if_unconsumed(
    producer: AsyncWatchedProducer, warn: Warn | None = None, *, queue: str | None = None
) -> bool:
    """Check once; warn and answer True when no live worker consumes ``queue`` (default: the
    producer's)."""
    queue = queue or producer.settings.queue
    if await async_live_consumers(producer, queue) != 0:
        return False
    (warn or log.warning)(no_worker_message(queue, producer.settings.effective_broker_url))
    return True


class _Shared:
    """What the watches of one producer share: a bound on their reads in flight, and one read
    of the live workers per half poll for all of them."""

    def __init__(self) -> None:
        self.reads = asyncio.Semaphore(READS_IN_FLIGHT)
        self._workers: asyncio.Future[list[WorkerPresence]] | None = None
        self._read_at = 0.0

    async def consumers(self, producer: AsyncWatchedProducer, queue: str) -> int | None:
        """:func:`async_live_consumers`, from a read at most half a poll old."""
        if self._workers is None or time.monotonic() - self._read_at > POLL_S / 2:
            self._read_at = time.monotonic()
            self._workers = asyncio.ensure_future(_live_workers(producer))
            self._workers.add_done_callback(_retrieved)
        try:
            return consuming(await asyncio.shield(self._workers), queue)
        except TetherError:
            return None


def _retrieved(read: asyncio.Future[list[WorkerPresence]]) -> None:
    """Mark a failed read as seen: the watches that awaited it had its error; one whose
    watches all ended meanwhile would log "exception was never retrieved"."""
    if not read.cancelled():
        read.exception()


_SHARED: weakref.WeakKeyDictionary[AsyncWatchedProducer, _Shared] = weakref.WeakKeyDictionary()


async def _watch(
    producer: AsyncWatchedProducer,
    run_id: str,
    warn: Warn | None,
    tenant: str | None,
    grace_s: float,
) -> None:
    shared = _SHARED.setdefault(producer, _Shared())
    await asyncio.sleep(grace_s)
    default = producer.settings.queue
    try:
        while True:
            async with shared.reads:
                queue = queued_on(await producer.record(run_id, tenant=tenant), default)
                if queue is None:
                    return
                consumers = await shared.consumers(producer, queue)
            if consumers == 0:
                (warn or log.warning)(
                    no_worker_message(queue, producer.settings.effective_broker_url)
                )
                return
            await asyncio.sleep(POLL_S)
    except TetherError as exc:  # the wait itself reports Redis trouble
        log.debug("worker watch stopped: %s", exc)


@contextlib.asynccontextmanager
async def async_watch_for_workers(
    producer: AsyncWatchedProducer,
    run_id: str,
    *,
    warn: Warn | None = None,
    tenant: str | None = None,
    grace_s: float = GRACE_S,
) -> AsyncIterator[None]:
    """Within the block, warn once if ``run_id`` stays queued with no live worker for its queue.

    Args:
        producer: the producer that submitted the run (its Redis, keys and queue are used).
        run_id: the run being waited for.
        warn: called with the warning (default: ``logging.getLogger("tether.producer").warning``).
        tenant: the run's tenant (default: the producer's).
        grace_s: how long the block runs before the first check (0: the caller already waited).
    """
    watch = asyncio.create_task(_watch(producer, run_id, warn, tenant, grace_s))
    try:
        yield
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
