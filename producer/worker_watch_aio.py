"""No silent hangs for asyncio code: the twin of :mod:`tether.producer.worker_watch` for
:class:`~tether.producer.client_aio.AsyncProducer`, a task of the event loop instead of a thread,
deciding through the same functions (the grace, when a run still waits in a queue, the
warning)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Protocol, cast

import redis.asyncio

from tether.errors import TetherError
from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.producer.worker_watch import GRACE_S, POLL_S, Warn, no_worker_message, queued_on
from tether.runs.presence import presences, record_keys
from tether.runs.queue.base import RunView
from tether.settings import Settings

log = logging.getLogger("tether.producer")


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


async def async_live_consumers(
    producer: AsyncWatchedProducer, queue: str | None = None
) -> int | None:
    """How many live workers consume ``queue`` (default: the producer's); None when Redis
    could not say."""
    queue = queue or producer.settings.queue
    client, keys = producer.redis, producer.keys
    try:
        with translate_errors(describe_client(client)):
            ids = cast("list[bytes]", await client.zrange(keys.workers(), 0, -1))
            docs = await client.mget(record_keys(keys, ids)) if ids else []
    except TetherError:
        return None
    return sum(1 for w in presences(cast("list[bytes | None]", docs)) if queue in w.queues)


async def async_warn_if_unconsumed(
    producer: AsyncWatchedProducer, warn: Warn | None = None, *, queue: str | None = None
) -> bool:
    """Check once; warn and answer True when no live worker consumes ``queue`` (default: the
    producer's)."""
    queue = queue or producer.settings.queue
    if await async_live_consumers(producer, queue) != 0:
        return False
    (warn or log.warning)(no_worker_message(queue, producer.settings.broker_url))
    return True


async def _watch(
    producer: AsyncWatchedProducer,
    run_id: str,
    warn: Warn | None,
    tenant: str | None,
    grace_s: float,
) -> None:
    await asyncio.sleep(grace_s)
    default = producer.settings.queue
    try:
        while True:
            queue = queued_on(await producer.record(run_id, tenant=tenant), default)
            if queue is None:
                return
            if await async_warn_if_unconsumed(producer, warn, queue=queue):
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
