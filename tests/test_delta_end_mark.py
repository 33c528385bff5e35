"""A run's end mark in its session's delta channel (#51): ``finish.lua`` appends it only when
the channel exists, a follower is told of it and moves past it (no piece of it, no read of it
twice). On a real redis-server."""

from __future__ import annotations

import redis

from tether.core.results import RunStatus
from tether.keys import RedisKeys
from tether.persistence.deltas import LiveDelta, RedisDeltaChannel
from tether.persistence.deltas.redis import ended_runs, parse_entries
from tether.runs.contract import RunRequest, RunResult
from tether.runs.queue.redis import RedisRunQueue


def _mark(client: redis.Redis, key: str, run_id: str) -> None:
    """What finish.lua appends (its fields as the script writes them)."""
    client.xadd(
        key, {"k": "e", "e": run_id, "r": "", "f": "0", "s": "0", "i": "0", "c": "0", "t": ""}
    )


def test_a_follower_is_told_of_the_end_mark_and_moves_past_it(redis_client: redis.Redis) -> None:
    keys = RedisKeys("endmark")
    channel = RedisDeltaChannel(redis_client, keys)
    key = keys.deltas("acme", "s-1")
    channel.publish("acme", "s-1", [LiveDelta("run-1", 1, 0, 0, "text", "hello")])
    _mark(redis_client, key, "run-1")
    channel.publish("acme", "s-1", [LiveDelta("run-2", 1, 0, 0, "text", "next")])
    raw = redis_client.xrange(key)
    assert ended_runs(raw) == ["run-1"]
    assert [d.text for _c, d in parse_entries(raw)] == ["hello", "next"]  # the mark is no piece
    followed = channel.follow("acme", "s-1", block_ms=50, idle_timeout_s=0.3)
    assert [d.text for _c, d in followed] == ["hello", "next"]  # past the mark, each once
    pieces, newest = channel.whole("acme", "s-1")
    assert [d.text for d in pieces] == ["hello", "next"]
    assert newest == raw[-1][0].decode()


def _finish(queue: RedisRunQueue, session_id: str, run_id: str) -> None:
    request = RunRequest(
        run_id=run_id, request_id=f"req-{run_id}", tenant="acme", session_id=session_id,
        agent="echo", input="hi",
    )  # fmt: skip
    queue.submit_many([request])
    queue.finish(
        RunResult(
            run_id=run_id,
            request_id=request.request_id,
            session_id=session_id,
            tenant="acme",
            status=RunStatus.COMPLETED,
            output="done",
            steps=1,
            attempts=1,
        )
    )


def test_finish_marks_the_end_only_in_a_channel_that_exists(redis_client: redis.Redis) -> None:
    keys = RedisKeys("endmark2")
    queue = RedisRunQueue(redis_client, keys, result_ttl_s=600)
    channel = RedisDeltaChannel(redis_client, keys)
    _finish(queue, "quiet", "run-q")  # no piece was ever published: no channel, no write
    assert not redis_client.exists(keys.deltas("acme", "quiet"))
    channel.publish("acme", "live", [LiveDelta("run-l", 1, 0, 0, "text", "hi")])
    _finish(queue, "live", "run-l")
    assert ended_runs(redis_client.xrange(keys.deltas("acme", "live"))) == ["run-l"]
