"""A session's head-cache key is writable by the session's tenant (its keys are its credential's,
docs/trust-model.md), so a worker must survive any value there: a zlib bomb (a few kilobytes
that inflate to gigabytes), an entry longer than any head, a key of another type. Each is a
miss (the store's head decides), is dropped, and costs the reader no more memory than a head
at the size limit. On a private redis-server; memory is measured with ``tracemalloc`` (every
allocation of the interpreter and of zlib's buffers), not timed.
"""

from __future__ import annotations

import logging
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
import redis

from tests.support.crash import TENANT, real_backends, request_for, worker_runtime
from tests.support.moto_server import S3TestBucket
from tether.keys import RedisKeys
from tether.persistence.headcache import RedisHeadCache
from tether.persistence.headcache.base import (
    MAX_ENTRY_BYTES,
    MAX_HEAD_BYTES,
    CachedHead,
    entry_limit,
    pack,
    unpack,
)
from tether.persistence.objects import head_key
from tether.runs.queue.base import submit
from tether.runs.queue.redis import RedisRunQueue
from tether.settings import Settings
from tether.worker.engine.claim_redis import CLAIM, RedisClaimer
from tether.worker.engine.cycle import drain

T = TENANT
S = "s-bomb"
KEYS = RedisKeys("tether-hostile")
MAX_BYTES = Settings.model_fields["head_cache_max_bytes"].default
BOMB_BYTES = 64 << 20
"""What the bomb inflates to: enough to tell a bounded reader (a few MB at most) from one that
inflates it all, small enough for a shared test machine when the reader is not bounded."""

#: What a read at the ceiling may hold: the inflated head, and its copy as zlib's output blocks
#: are joined, plus the entry and the reply's buffers.
CEILING_PEAK = 2 * MAX_HEAD_BYTES + (4 << 20)
BOUNDED_PEAK = BOMB_BYTES // 4
"""What a bounded read of the bomb (at most 64 KB, the default limit) stays far below, with room
for what else the measured call allocates (a process's first S3 read loads botocore's service
models: 10 MB seen under the full suite); an unbounded one holds the whole 64 MiB, twice."""
assert CEILING_PEAK < BOMB_BYTES

R = TypeVar("R")


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """A ``thc2`` entry of ~64 KB inflating to 64 MiB: within the length any head of the
    default size limit packs into, so only the inflation limit stops it."""
    deflate = zlib.compressobj(9)
    body = deflate.compress(b"\0" * BOMB_BYTES) + deflate.flush()
    entry = b"thc2\nv-forged\n" + body
    assert len(entry) <= entry_limit(MAX_BYTES)
    return entry


@pytest.fixture
def cache(redis_client: redis.Redis) -> Iterator[RedisHeadCache]:
    yield RedisHeadCache(redis_client, KEYS, ttl_ms=60_000, max_bytes=MAX_BYTES)


def peak_bytes(call: Callable[[], R]) -> tuple[R, int]:
    """``call()`` and the most memory it held at once."""
    tracemalloc.start()
    try:
        return call(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_bomb_inflates_no_further_than_the_limit(bomb: bytes) -> None:
    hit, peak = peak_bytes(lambda: unpack(bomb, MAX_BYTES))
    assert peak < BOUNDED_PEAK, f"unpack held {peak} bytes"
    assert hit is None
    # with no limit given (the claim's reply) the ceiling of every setting bounds it
    hit, peak = peak_bytes(lambda: unpack(bomb))
    assert peak < CEILING_PEAK, f"unpack held {peak} bytes"
    assert hit is None
    # a head at the limit still reads, whatever it holds
    at_limit = pack(bytes(range(256)) * (MAX_BYTES // 256), "v1")
    assert at_limit is not None and len(at_limit) <= entry_limit(MAX_BYTES)
    assert unpack(at_limit, MAX_BYTES) == CachedHead(bytes(range(256)) * (MAX_BYTES // 256), "v1")
    assert unpack(pack(b"x" * (MAX_BYTES + 1), "v1") or b"", MAX_BYTES) is None


def test_the_limits_agree_with_the_setting_and_the_claim_script() -> None:
    ceiling = [
        m.le for m in Settings.model_fields["head_cache_max_bytes"].metadata if hasattr(m, "le")
    ]
    assert ceiling == [MAX_HEAD_BYTES]
    assert f"local MAX_ENTRY_BYTES = {MAX_ENTRY_BYTES}\n" in CLAIM.source
    assert pack(b"head", "v" * 257) is None  # a version no entry limit allows is not framed


def test_a_bomb_in_the_cache_key_is_a_miss_and_is_dropped(
    cache: RedisHeadCache,
    redis_client: redis.Redis,
    bomb: bytes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = KEYS.head_cache(T, S)
    redis_client.set(key, bomb)  # what the tenant's own credential may do
    with caplog.at_level(logging.WARNING):
        hit, peak = peak_bytes(lambda: cache.get(T, S))
    assert peak < BOUNDED_PEAK, f"get held {peak} bytes"
    assert hit is None
    assert not redis_client.exists(key)
    assert [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()] != []
    caplog.clear()
    assert cache.get(T, S) is None and caplog.records == []  # gone: warned once


def test_an_entry_longer_than_any_head_is_dropped_unread(
    cache: RedisHeadCache, redis_client: redis.Redis
) -> None:
    key = KEYS.head_cache(T, S)
    huge = b"thc1\nv\n" + b"x" * (8 << 20)
    redis_client.set(key, huge)
    hit, peak = peak_bytes(lambda: cache.get(T, S))
    assert peak < 4 << 20, f"get held {peak} bytes: the entry was read"  # it is 8 MiB
    assert hit is None
    assert not redis_client.exists(key)


def test_a_cache_key_of_another_type_is_a_miss_and_is_dropped(
    cache: RedisHeadCache, redis_client: redis.Redis
) -> None:
    key = KEYS.head_cache(T, S)
    redis_client.hset(key, "f", "v")
    assert cache.get(T, S) is None
    assert not redis_client.exists(key)


def claimer(client: redis.Redis) -> RedisClaimer:
    runs = RedisRunQueue(client, KEYS, result_ttl_s=3600)
    return RedisClaimer(client, KEYS, runs, head_cache=True)


def claim_with_entry(client: redis.Redis, entry: bytes, session_id: str) -> tuple[object, int]:
    """A claim of a session with one queued run whose cache key holds ``entry``: what it read,
    and the most memory the claim held."""
    runs = RedisRunQueue(client, KEYS, result_ttl_s=3600)
    submit(runs, request_for(session_id, "1+1"))
    client.set(KEYS.head_cache(T, session_id), entry)
    claim, peak = peak_bytes(lambda: claimer(client).claim(T, session_id, owner="w", ttl_ms=10_000))
    assert claim.lease is not None and claim.cache_read
    return claim.cached_head, peak


def test_the_workers_claim_reads_a_bomb_as_a_miss_within_the_ceiling(
    redis_client: redis.Redis, bomb: bytes
) -> None:
    cached, peak = claim_with_entry(redis_client, bomb, "s-claim-bomb")
    assert peak < CEILING_PEAK, f"claim held {peak} bytes"
    assert cached is None


def test_the_workers_claim_drops_an_entry_longer_than_any_head_unread(
    redis_client: redis.Redis,
) -> None:
    sid = "s-claim-huge"
    cached, peak = claim_with_entry(redis_client, b"x" * (MAX_ENTRY_BYTES + 1), sid)
    assert peak < 8 << 20, f"claim held {peak} bytes: the entry came back"  # 16 MB
    assert cached is None
    assert not redis_client.exists(KEYS.head_cache(T, sid))


def test_a_run_on_a_session_with_a_bomb_reads_the_store_and_completes(
    redis_client: redis.Redis, s3_bucket: S3TestBucket, bomb: bytes
) -> None:
    backends = real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
    keys: RedisKeys = backends.stream._keys
    sid = "s-bombed"
    first = request_for(sid, "1+1")
    rt = worker_runtime(backends, "w")
    submit(rt.runs, first)
    assert drain(rt, TENANT, sid) == 1
    stored = backends.store.blobs.get(head_key(TENANT, sid))
    assert stored is not None
    redis_client.set(keys.head_cache(TENANT, sid), bomb)

    loaded, peak = peak_bytes(lambda: backends.store.load(TENANT, sid))
    assert peak < BOUNDED_PEAK, f"the load held {peak} bytes"
    assert loaded is not None and loaded.version == stored.token  # the store's head
    assert not redis_client.exists(keys.head_cache(TENANT, sid))

    redis_client.set(keys.head_cache(TENANT, sid), bomb)
    second = request_for(sid, "2+2")
    submit(rt.runs, second)
    assert drain(rt, TENANT, sid) == 1
    view = backends.runs.get(second.ref)
    assert view is not None and view.result is not None and view.result.output == "4"
    after = backends.store.load(TENANT, sid)  # the first run's memory was not lost
    assert after is not None
    assert len(after.snapshot.memory.items) > len(loaded.snapshot.memory.items)
