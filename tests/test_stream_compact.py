"""A session's live stream at rest gives back the room Redis keeps for appends (up to 4 KB per
stream on Redis 7: more than a short session's events): the worker compacts it when the
session's queue is empty and its lease free. On redis-server + S3 over HTTP, with the engine's
real drain: the stream keeps every entry, its IDs, its last ID and its TTL; a tail blocked on
it during the compaction, and a follower that connects after a run parked, each see every event
of the session once."""

from __future__ import annotations

import logging
import threading
from typing import cast

import pytest
import redis

from tests.support.crash import FAR_MS, TENANT, Backends, nap_request, real_backends, worker_runtime
from tests.support.moto_server import S3TestBucket
from tests.support.wait_agents import sleeper_agent
from tether.core.events import AgentEvent, EventType
from tether.core.results import RunStatus
from tether.keys import RedisKeys
from tether.persistence.streams.base import CompactingStream
from tether.persistence.streams.redis import COMPACT_MAX_ENTRIES, RedisEventStream
from tether.runs.queue.base import submit
from tether.runtime.registry import AgentRegistry
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices
from tether.worker.engine.wakes import wake_due


def _runtime(backends: Backends) -> EngineServices:
    return worker_runtime(backends, "w1", registry=AgentRegistry({"sleeper": sleeper_agent}))


def _entries(client: redis.Redis, key: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    return client.xrange(key)  # type: ignore[return-value]


def _fresh_copy_bytes(client: redis.Redis, key: str) -> int:
    """What the same entries cost in a stream written by appends, as the worker left it."""
    twin = key + ":twin"
    for entry_id, fields in _entries(client, key):
        client.xadd(twin, fields, id=entry_id)  # type: ignore[arg-type]
    size = int(client.memory_usage(twin, samples=0) or 0)
    client.delete(twin)
    return size


def _redis_major(client: redis.Redis) -> int:
    return int(str(client.info("server")["redis_version"]).split(".")[0])


def test_a_parked_session_keeps_its_events_without_the_slack(
    redis_client: redis.Redis, s3_bucket: S3TestBucket
) -> None:
    backends = real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
    rt = _runtime(backends)
    assert isinstance(rt.stream, CompactingStream)
    request = nap_request("s-rest", 5)
    submit(rt.runs, request)
    drain(rt, TENANT, "s-rest")
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None
    assert view.result.status is RunStatus.WAITING
    key = backends.stream._keys.events(TENANT, "s-rest")
    entries = _entries(redis_client, key)
    assert [int(f[b"seq"]) for _, f in entries] == list(range(1, view.result.last_seq + 1))
    compacted = int(redis_client.memory_usage(key, samples=0) or 0)
    appended = _fresh_copy_bytes(redis_client, key)
    if _redis_major(redis_client) >= 7:  # 6.x sets no room aside: nothing to give back
        assert compacted < appended
    # a follower that connects after the park sees every event once, in order
    late = list(backends.stream.tail(TENANT, "s-rest", after_seq=0, idle_timeout_s=0))
    assert [e.seq for e in late] == list(range(1, view.result.last_seq + 1))


def test_compaction_keeps_ids_last_id_and_ttl_and_skips_long_streams(
    redis_client: redis.Redis,
) -> None:
    keys = RedisKeys("compact-t")
    stream = RedisEventStream(redis_client, keys=keys)
    key = keys.events(TENANT, "s-ids")
    for n in range(5):
        redis_client.xadd(key, {"seq": str(n + 1), "fence": "1", "event": "x" * 200})
    redis_client.pexpire(key, 600_000)
    before = _entries(redis_client, key)
    last_id = redis_client.xinfo_stream(key)["last-generated-id"]
    assert stream.compact(TENANT, "s-ids")
    assert _entries(redis_client, key) == before
    assert redis_client.xinfo_stream(key)["last-generated-id"] == last_id
    assert 0 < int(redis_client.pttl(key)) <= 600_000
    assert redis_client.xadd(key, {"seq": "6", "fence": "1", "event": "y"}) > last_id
    long_key = keys.events(TENANT, "s-long")
    for n in range(COMPACT_MAX_ENTRIES + 1):
        redis_client.xadd(long_key, {"seq": str(n + 1), "fence": "1", "event": "z"})
    assert not stream.compact(TENANT, "s-long")
    assert not stream.compact(TENANT, "s-none")  # no stream: nothing to do, nothing made
    assert not redis_client.exists(keys.events(TENANT, "s-none"))


def test_a_tail_blocked_through_the_compaction_sees_every_event_once(
    redis_client: redis.Redis, s3_bucket: S3TestBucket
) -> None:
    backends = real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
    rt = _runtime(backends)
    seen: list[AgentEvent] = []

    def follow() -> None:
        for event in backends.stream.tail(TENANT, "s-tail", block_ms=200):
            seen.append(event)
            answered = any(e.type is EventType.FINAL_OUTPUT for e in seen)
            if answered and event.type is EventType.STEP_END:  # the continuation's last event
                return

    tail = threading.Thread(target=follow, daemon=True)
    tail.start()
    request = nap_request("s-tail", 5)
    submit(rt.runs, request)
    drain(rt, TENANT, "s-tail")  # parks, then compacts the stream the tail is blocked on
    assert wake_due(rt, at_ms=FAR_MS) == 1
    drain(rt, TENANT, "s-tail")  # the continuation appends after the compacted entries
    tail.join(timeout=60)
    assert not tail.is_alive(), "the tail never saw the continuation's final output"
    meta = backends.stream._keys.stream_meta(TENANT, "s-tail")
    last_seq = int(cast(bytes, redis_client.hget(meta, "last_seq")))
    assert [e.seq for e in seen] == list(range(1, last_seq + 1))


def test_a_server_that_refuses_restore_costs_one_warning_and_no_failure(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    keys = RedisKeys("compact-acl")
    key = keys.events(TENANT, "s-acl")
    redis_client.xadd(key, {"seq": "1", "fence": "1", "event": "x"})
    redis_client.execute_command(
        "ACL", "SETUSER", "nodump", "reset", "on", ">pw", "~*", "+@all", "-@dangerous"
    )
    limited = redis.Redis.from_url(redis_url, username="nodump", password="pw")
    try:
        stream = RedisEventStream(limited, keys=keys)
        with caplog.at_level(logging.WARNING):
            assert not stream.compact(TENANT, "s-acl")
            assert not stream.compact(TENANT, "s-acl")  # not asked again
        warnings = [r for r in caplog.records if "refused to compact" in r.getMessage()]
        assert len(warnings) == 1
        assert redis_client.xlen(key) == 1
    finally:
        limited.close()
        redis_client.execute_command("ACL", "DELUSER", "nodump")
