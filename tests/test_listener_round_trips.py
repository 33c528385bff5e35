"""#46: both completion listeners read a batch of completions in the same number of Redis round
trips: one ``XREAD`` of the producer's feed, whose entries carry small results, plus one
pipelined read of the records whose result did not fit in the entry. The asyncio listener used
to read every record again (two round trips for a batch the blocking one read in one).

Counted on a real private redis-server by wrapping the listener's own client: every command it
sends and every pipeline it executes is one round trip. A batch is one ``XREAD`` that returned
entries, with what the listener sent after it until its next ``XREAD``; the ``XREAD``s that
returned nothing (the blocking wait timing out) are no batch and are not counted.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tether.core.results import RunStatus
from tether.ids import new_id
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.persistence.redis_conn_aio import async_redis_from_url
from tether.producer.listener import CompletionListener
from tether.producer.listener_aio import AsyncCompletionListener
from tether.runs.contract import RunRequest, RunResult
from tether.runs.queue.base import FEED_RESULT_MAX_BYTES
from tether.runs.queue.redis import RedisRunQueue
from tether.runs.queue.redis_aio import AsyncRedisRunQueue

T, PRODUCER = "acme", "p-trips"
FEED = RedisKeys.feed(T, PRODUCER)
RUNS = 6
HOUR_S = 3600.0  # no periodic recheck: only the feed settles a handle
SETTLE_S = 10.0


@dataclass
class Trips:
    """The round trips a client made, in order: ``(command, whether the reply was empty)``."""

    log: list[tuple[str, bool]] = field(default_factory=list)

    def note(self, command: Any, reply: Any) -> None:
        name = command.decode() if isinstance(command, bytes) else str(command)
        self.log.append((name.upper(), not reply))

    def per_batch(self) -> tuple[int, int]:
        """``(round trips, batches)`` since the log was cleared."""
        counted = [(name, empty) for name, empty in self.log if not (name == "XREAD" and empty)]
        batches = sum(1 for name, _ in counted if name == "XREAD")
        return len(counted), batches


def count_sync(client: Any, trips: Trips) -> None:
    """Note every round trip of a redis-py client."""
    send, pipeline = client.execute_command, client.pipeline

    def execute_command(*args: Any, **options: Any) -> Any:
        reply = send(*args, **options)
        trips.note(args[0], reply)
        return reply

    def counted_pipeline(*args: Any, **kw: Any) -> Any:
        pipe = pipeline(*args, **kw)
        execute = pipe.execute

        def run(*a: Any, **k: Any) -> Any:
            replies = execute(*a, **k)
            trips.note("PIPELINE", True)
            return replies

        pipe.execute = run
        return pipe

    client.execute_command, client.pipeline = execute_command, counted_pipeline


def count_async(client: Any, trips: Trips) -> None:
    """Note every round trip of a ``redis.asyncio`` client."""
    send, pipeline = client.execute_command, client.pipeline

    async def execute_command(*args: Any, **options: Any) -> Any:
        reply = await send(*args, **options)
        trips.note(args[0], reply)
        return reply

    def counted_pipeline(*args: Any, **kw: Any) -> Any:
        pipe = pipeline(*args, **kw)
        execute = pipe.execute

        async def run(*a: Any, **k: Any) -> Any:
            replies = await execute(*a, **k)
            trips.note("PIPELINE", True)
            return replies

        pipe.execute = run
        return pipe

    client.execute_command, client.pipeline = execute_command, counted_pipeline


def _request() -> RunRequest:
    run_id = new_id("run")
    return RunRequest(
        run_id=run_id, request_id=run_id, tenant=T, session_id=new_id("s"),
        agent="echo", input="hi", reply_to=PRODUCER,
    )  # fmt: skip


def _requests() -> list[RunRequest]:
    return [_request() for _ in range(RUNS)]


def _finish_all(queue: RedisRunQueue, requests: list[RunRequest], big: bool) -> None:
    output = "x" * (FEED_RESULT_MAX_BYTES + 100) if big else "ok"
    for r in requests:
        result = RunResult(
            run_id=r.run_id, request_id=r.request_id, session_id=r.session_id, tenant=T,
            status=RunStatus.COMPLETED, output=output, steps=1, attempts=1,
        )  # fmt: skip
        queue.finish(result, reply_to=PRODUCER)


def _sync_listener(url: str, keys: RedisKeys, big: bool) -> tuple[int, int]:
    plain, counted, trips = redis_from_url(url), redis_from_url(url), Trips()
    count_sync(counted, trips)
    queue = RedisRunQueue(plain, keys, result_ttl_s=600)
    runs = RedisRunQueue(counted, keys, result_ttl_s=600)
    listener = CompletionListener(runs, feed=FEED, recheck_interval_s=HOUR_S)
    requests = _requests()
    queue.submit_many(requests)
    settled = threading.Semaphore(0)
    try:
        for r in requests:
            listener.register(r.ref, lambda _result: settled.release())
        trips.log.clear()  # from here on: the listener's reads of the batches alone
        _finish_all(queue, requests, big)
        for _ in requests:
            assert settled.acquire(timeout=SETTLE_S), "a run was not settled by the feed"
        return trips.per_batch()
    finally:
        listener.close()
        plain.close()


def _async_listener(url: str, keys: RedisKeys, big: bool) -> tuple[int, int]:
    async def main() -> tuple[int, int]:
        plain, counted, trips = redis_from_url(url), async_redis_from_url(url), Trips()
        count_async(counted, trips)
        queue = RedisRunQueue(plain, keys, result_ttl_s=600)
        runs = AsyncRedisRunQueue(counted, keys, result_ttl_s=600)
        listener = AsyncCompletionListener(runs, feed=FEED, recheck_interval_s=HOUR_S)
        requests = _requests()
        queue.submit_many(requests)
        loop = asyncio.get_running_loop()
        settled = [loop.create_future() for _ in requests]
        try:
            for r, done in zip(requests, settled, strict=True):
                await listener.register(r.ref, done.set_result)
            trips.log.clear()
            await asyncio.to_thread(_finish_all, queue, requests, big)
            await asyncio.wait_for(asyncio.gather(*settled), SETTLE_S)
            return trips.per_batch()
        finally:
            await listener.aclose()
            await counted.aclose()
            plain.close()

    return asyncio.run(main())


Run = Callable[[str, RedisKeys, bool], tuple[int, int]]


@pytest.mark.parametrize(
    ("big", "per_batch"),
    [(False, 1.0), (True, 2.0)],
    ids=["results-in-the-feed", "results-in-the-records"],
)
def test_both_listeners_read_a_batch_in_the_same_round_trips(
    redis_url: str, big: bool, per_batch: float
) -> None:
    seen: dict[str, float] = {}
    runs: dict[str, Run] = {"sync": _sync_listener, "asyncio": _async_listener}
    for name, run in runs.items():
        trips, batches = run(redis_url, RedisKeys(f"trips-{new_id('n')[-6:]}"), big)
        assert batches >= 1
        seen[name] = trips / batches
    print(f"\nround trips per completion batch ({'big' if big else 'small'} results): {seen}")
    assert seen["sync"] == seen["asyncio"] == per_batch
