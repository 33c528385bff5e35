"""Contract of :class:`tether.persistence.headcache.base.HeadCache`: memory, Redis and Redis
Cluster pass the same tests. Fences come from the lease manager of the same backend, as in a
worker."""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.protocols import assert_conforms
from tether.keys import RedisKeys
from tether.persistence.headcache import InMemoryHeadCache, RedisHeadCache
from tether.persistence.headcache.base import CachedHead, HeadCache, pack, unpack
from tether.persistence.redis_conn import redis_from_url
from tether.runs.leases import InMemoryLeaseManager, RedisLeaseManager
from tether.runs.leases.base import Lease, LeaseManager

T = "acme"
S = "s-1"
TTL_MS = 300
MAX_BYTES = 1_000
KEYS = RedisKeys("tether-test")


@dataclass
class Backend:
    cache: HeadCache
    leases: LeaseManager

    def lease(self, session_id: str = S) -> Lease:
        """A new grant on the session (a new fence), released at once so the next can come."""
        lease = self.leases.acquire(T, session_id, "worker", 10_000)
        assert lease is not None
        assert self.leases.release(lease)
        return lease


@pytest.fixture(params=["memory", "redis", "cluster"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        leases = InMemoryLeaseManager()
        cache = InMemoryHeadCache(leases.current_fence, ttl_ms=TTL_MS, max_bytes=MAX_BYTES)
        yield Backend(cache, leases)
        return
    url_fixture = "cluster_url" if request.param == "cluster" else "redis_url"
    client = redis_from_url(request.getfixturevalue(url_fixture))
    try:
        yield Backend(
            RedisHeadCache(client, KEYS, ttl_ms=TTL_MS, max_bytes=MAX_BYTES),
            RedisLeaseManager(client, keys=KEYS),
        )
    finally:
        client.close()


def test_the_newest_holder_caches_and_readers_get_it(backend: Backend) -> None:
    assert_conforms(backend.cache, HeadCache)
    assert backend.cache.get(T, S) is None
    fence = backend.lease().fence
    assert backend.cache.put(T, S, b"head-1", '"etag-1"', fence)
    assert backend.cache.get(T, S) == CachedHead(b"head-1", '"etag-1"')
    assert backend.cache.put(T, S, b"head-2", '"etag-2"', fence)  # the same holder writes again
    assert backend.cache.get(T, S) == CachedHead(b"head-2", '"etag-2"')
    assert backend.cache.get(T, "s-2") is None  # sessions are independent
    assert backend.cache.get("other", S) is None  # so are tenants


def test_a_holder_whose_fence_is_old_cannot_write_and_its_try_drops_the_entry(
    backend: Backend,
) -> None:
    frozen = backend.lease().fence  # a worker that froze between its store write and its put
    newer = backend.lease().fence
    assert backend.cache.put(T, S, b"newer", "v-new", newer)
    assert not backend.cache.put(T, S, b"older", "v-old", frozen)
    # dropped rather than kept: the store was written by someone the cache did not hear from
    assert backend.cache.get(T, S) is None


def test_a_writer_without_a_lease_drops_the_entry(backend: Backend) -> None:
    fence = backend.lease().fence
    assert backend.cache.put(T, S, b"head", "v1", fence)
    assert not backend.cache.put(T, S, b"offline write", "v2", 0)
    assert backend.cache.get(T, S) is None


def test_a_head_over_the_size_limit_is_not_cached_and_drops_the_old_entry(
    backend: Backend,
) -> None:
    fence = backend.lease().fence
    assert backend.cache.put(T, S, b"small", "v1", fence)
    assert not backend.cache.put(T, S, b"x" * (MAX_BYTES + 1), "v2", fence)
    assert backend.cache.get(T, S) is None
    assert backend.cache.put(T, S, b"x" * MAX_BYTES, "v3", fence)  # the limit itself fits


def test_a_version_that_cannot_be_framed_is_not_cached(backend: Backend) -> None:
    fence = backend.lease().fence
    assert backend.cache.put(T, S, b"head", "v1", fence)
    assert not backend.cache.put(T, S, b"head", "two\nlines", fence)
    assert backend.cache.get(T, S) is None


def test_drop_forgets_the_entry(backend: Backend) -> None:
    fence = backend.lease().fence
    assert backend.cache.put(T, S, b"head", "v1", fence)
    backend.cache.drop(T, S)
    assert backend.cache.get(T, S) is None
    backend.cache.drop(T, S)  # dropping nothing is fine


def test_an_entry_expires_after_its_ttl(backend: Backend) -> None:
    fence = backend.lease().fence
    assert backend.cache.put(T, S, b"head", "v1", fence)
    assert backend.cache.get(T, S) is not None
    deadline = time.monotonic() + 5.0
    while backend.cache.get(T, S) is not None:
        assert time.monotonic() < deadline, f"entry still there {TTL_MS} ms after its put"
        time.sleep(0.05)


def test_entry_format_is_versioned() -> None:
    entry = pack(b'{"tether":"head"}', '"abc"')
    assert entry == b'thc2\n"abc"\n' + zlib.compress(b'{"tether":"head"}', 1)
    assert unpack(entry) == CachedHead(b'{"tether":"head"}', '"abc"')
    # a head body may hold newlines: only the first two separate fields
    assert unpack(pack(b"a\nb", "v")) == CachedHead(b"a\nb", "v")
    # the uncompressed entries of earlier builds are still read (a rolling upgrade)
    assert unpack(b'thc1\n"abc"\n{"tether":"head"}') == CachedHead(b'{"tether":"head"}', '"abc"')
    assert unpack(b"thc3\nv\ndata") is None  # a format this build does not know is a miss
    assert unpack(b"thc2\nv\nnot zlib") is None  # nor is a damaged one
    assert unpack(b"garbage") is None
    assert unpack(b"thc1\n\ndata") is None


def test_an_entry_holds_the_head_compressed() -> None:
    head = b'{"items": [' + b'{"type": "user_message", "content": "remember fact"},' * 200 + b"]}"
    entry = pack(head, "v1")
    assert entry is not None and len(entry) * 5 < len(head)
    assert unpack(entry) == CachedHead(head, "v1")
