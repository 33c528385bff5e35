"""#19 soak, #15: the completion feeds hold the completions of about one result TTL, not of
every run ever (one announcement in 16, chosen by run id, trims entries older than the TTL), on
a real redis-server."""

from __future__ import annotations

import zlib
from typing import Any

import redis

from tether.core.results import RunStatus
from tether.ids import new_id
from tether.keys import RedisKeys
from tether.runs.contract import RunRequest, RunResult
from tether.runs.queue.redis import RedisRunQueue
from tether.runs.queue.redis._common import FEED_TRIM_EVERY

T, PRODUCER = "acme", "p-retention"
OLD_ENTRIES = 300


def _run_id(trims: bool) -> str:
    while True:
        run_id = new_id("run")
        if (zlib.crc32(run_id.encode()) % FEED_TRIM_EVERY == 0) == trims:
            return run_id


def _finish(queue: RedisRunQueue, run_id: str) -> None:
    request = RunRequest(
        run_id=run_id, request_id=f"req-{run_id}", tenant=T, session_id="s-1", agent="echo",
        input="hi", reply_to=PRODUCER,
    )  # fmt: skip
    queue.submit_many([request])
    result = RunResult(
        run_id=run_id, request_id=request.request_id, session_id="s-1", tenant=T,
        status=RunStatus.COMPLETED, output="done", steps=1, attempts=1,
    )  # fmt: skip
    queue.finish(result, reply_to=PRODUCER)


def _aged_feeds(client: Any, keys: RedisKeys) -> list[str]:
    """Both feeds, each holding OLD_ENTRIES entries from 1970 (far older than any TTL)."""
    feed = keys.feed(T, PRODUCER)
    feeds = [
        keys.done(keys.feed_shard_of(None, T, "s-1")),
        keys.producer_done(feed, keys.feed_shard_of(feed, T, "s-1")),
    ]
    for feed in feeds:
        for i in range(OLD_ENTRIES):
            client.xadd(feed, {"run_id": f"old-{i}"}, id=f"{1000 + i}-0")
    return feeds


def test_an_announcement_chosen_by_run_id_trims_entries_older_than_the_ttl(
    redis_client: redis.Redis,
) -> None:
    keys = RedisKeys(f"feeds-{new_id('n')[-6:]}")
    queue = RedisRunQueue(redis_client, keys, result_ttl_s=600)
    feeds = _aged_feeds(redis_client, keys)
    _finish(queue, _run_id(trims=False))
    assert [redis_client.xlen(feed) for feed in feeds] == [OLD_ENTRIES + 1] * 2
    trimming = _run_id(trims=True)
    _finish(queue, trimming)
    for feed in feeds:
        # approximate trimming drops whole stream nodes (100 entries each): what stays is the
        # node holding the new entries
        assert redis_client.xlen(feed) <= 102
        newest = redis_client.xrevrange(feed, count=1)[0][1]
        assert newest[b"run_id"] == trimming.encode()
