"""#15: the completion listener looks at a run's record when it is registered only when the
feed could already have gone past its completion; a run its producer queued after the feed
position was taken is settled from the feed alone, whose entry carries the result (no read of
the record at all). A run registered
after its completion went by unawaited is still settled at once, not at the next recheck. The
asyncio listener decides the same (its tests below mirror the blocking listener's).

On a real redis-server; the periodic recheck is set to an hour, so only the paths under test
can settle a handle.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tether.core.results import RunStatus
from tether.ids import new_id
from tether.keys import RedisKeys
from tether.persistence.redis_conn_aio import async_redis_from_url
from tether.producer.listener import CompletionListener
from tether.producer.listener_aio import AsyncCompletionListener
from tether.runs.contract import RunRequest, RunResult
from tether.runs.queue.redis import RedisRunQueue
from tether.runs.queue.redis_aio import AsyncRedisRunQueue

T, PRODUCER = "acme", "p-first-look"
FEED = RedisKeys.feed(T, PRODUCER)
HOUR_S = 3600.0


@pytest.fixture
def queue(redis_client: redis.Redis) -> RedisRunQueue:
    return RedisRunQueue(redis_client, RedisKeys(f"look-{new_id('n')[-6:]}"), result_ttl_s=600)


@pytest.fixture
def listener(queue: RedisRunQueue) -> Iterator[CompletionListener]:
    listening = CompletionListener(queue, feed=FEED, recheck_interval_s=HOUR_S)
    yield listening
    listening.close()


def _request(session: str = "s-1") -> RunRequest:
    run_id = new_id("run")
    return RunRequest(
        run_id=run_id, request_id=f"req-{run_id}", tenant=T, session_id=session,
        agent="echo", input="hi", reply_to=PRODUCER,
    )  # fmt: skip


def _queued(queue: RedisRunQueue) -> tuple[RunRequest, float]:
    queued_after = time.monotonic()
    request = _request()
    queue.submit_many([request])
    return request, queued_after


def _finish(queue: RedisRunQueue, request: RunRequest) -> RunResult:
    result = RunResult(
        run_id=request.run_id, request_id=request.request_id, session_id=request.session_id,
        tenant=T, status=RunStatus.COMPLETED, output="done", steps=1, attempts=1,
    )  # fmt: skip
    queue.finish(result, reply_to=PRODUCER)
    return result


class _Settled:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.result: RunResult | None = None

    def __call__(self, result: RunResult) -> None:
        self.result = result
        self.event.set()


def _hmgets(client: Any) -> int:
    return int(client.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0))


def test_a_run_queued_after_the_position_is_settled_by_the_feed_without_a_first_look(
    queue: RedisRunQueue, listener: CompletionListener, redis_client: redis.Redis
) -> None:
    first, _ = _queued(queue)
    listener.register(first.ref, _Settled())  # starts the listener: its position is taken
    request, queued_after = _queued(queue)
    before = _hmgets(redis_client)
    settled = _Settled()
    listener.register(request.ref, settled, queued_after=queued_after)
    assert _hmgets(redis_client) == before  # no look at the record
    assert not settled.event.is_set()
    result = _finish(queue, request)
    assert settled.event.wait(10), "the feed did not settle the run"
    assert settled.result == result
    assert _hmgets(redis_client) == before  # the feed entry carried the result: no read at all


def test_a_run_registered_after_its_completion_went_by_is_settled_at_once(
    queue: RedisRunQueue, listener: CompletionListener
) -> None:
    first, _ = _queued(queue)
    listener.register(first.ref, _Settled())
    request, queued_after = _queued(queue)
    result = _finish(queue, request)  # nobody awaits it yet: the listener reads it and moves on
    marker, _ = _queued(queue)
    seen = _Settled()
    listener.register(marker.ref, seen)
    _finish(queue, marker)
    assert seen.event.wait(10)  # the feed is now past the first completion
    settled = _Settled()
    listener.register(request.ref, settled, queued_after=queued_after)
    assert settled.event.wait(5), "a completion that went by was waited for, not looked up"
    assert settled.result == result


def test_a_run_queued_before_the_position_is_looked_up(
    queue: RedisRunQueue, listener: CompletionListener
) -> None:
    request, queued_after = _queued(queue)
    result = _finish(queue, request)  # finished before the listener even started
    settled = _Settled()
    listener.register(request.ref, settled, queued_after=queued_after)
    assert settled.event.wait(5)
    assert settled.result == result


# --- the asyncio listener decides the same (#46) ------------------------------------------------


def _async_case(queue: RedisRunQueue, redis_url: str, body: Any) -> None:
    """Run ``body(listener)`` with an asyncio listener of the same feed, on its own loop."""

    async def main() -> None:
        client = async_redis_from_url(redis_url)
        runs = AsyncRedisRunQueue(client, queue.keys, result_ttl_s=600)
        listener = AsyncCompletionListener(runs, feed=FEED, recheck_interval_s=HOUR_S)
        try:
            await body(listener)
        finally:
            await listener.aclose()
            await client.aclose()

    asyncio.run(main())


def _settled_on_loop() -> tuple[asyncio.Future[RunResult], Any]:
    done: asyncio.Future[RunResult] = asyncio.get_running_loop().create_future()
    return done, lambda result: done.done() or done.set_result(result)


def test_async_a_run_queued_after_the_position_is_settled_by_the_feed_without_a_first_look(
    queue: RedisRunQueue, redis_client: redis.Redis, redis_url: str
) -> None:
    async def body(listener: AsyncCompletionListener) -> None:
        first, _ = _queued(queue)
        await listener.register(first.ref, _settled_on_loop()[1])  # its position is taken
        request, queued_after = _queued(queue)
        before = _hmgets(redis_client)
        settled, settle = _settled_on_loop()
        await listener.register(request.ref, settle, queued_after=queued_after)
        assert _hmgets(redis_client) == before  # no look at the record
        assert not settled.done()
        result = await asyncio.to_thread(_finish, queue, request)
        assert await asyncio.wait_for(settled, 10) == result
        assert _hmgets(redis_client) == before  # the feed entry carried the result

    _async_case(queue, redis_url, body)


def test_async_a_run_registered_after_its_completion_went_by_is_settled_at_once(
    queue: RedisRunQueue, redis_url: str
) -> None:
    async def body(listener: AsyncCompletionListener) -> None:
        first, _ = _queued(queue)
        await listener.register(first.ref, _settled_on_loop()[1])
        request, queued_after = _queued(queue)
        result = await asyncio.to_thread(_finish, queue, request)  # nobody awaits it yet
        marker, _ = _queued(queue)
        seen, settle_marker = _settled_on_loop()
        await listener.register(marker.ref, settle_marker)
        await asyncio.to_thread(_finish, queue, marker)
        await asyncio.wait_for(seen, 10)  # the feed is now past the first completion
        settled, settle = _settled_on_loop()
        await listener.register(request.ref, settle, queued_after=queued_after)
        assert await asyncio.wait_for(settled, 5) == result

    _async_case(queue, redis_url, body)


def test_async_a_run_queued_before_the_position_is_looked_up(
    queue: RedisRunQueue, redis_url: str
) -> None:
    async def body(listener: AsyncCompletionListener) -> None:
        request, queued_after = _queued(queue)
        result = _finish(queue, request)  # finished before the listener even started
        settled, settle = _settled_on_loop()
        await listener.register(request.ref, settle, queued_after=queued_after)
        assert await asyncio.wait_for(settled, 5) == result

    _async_case(queue, redis_url, body)
