"""The head cache never lets a run act on an old head (see :mod:`tether.persistence.headcache`).

Each test breaks the cache where a worker could: it dies between its store write and its cache
write, the cache refuses the write, the cache is unreachable for both the write and the drop, or
the session is deleted by a tool that does not know the cache. Then the session's next runs
must see the store's head: every request applied once, and nothing run twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from tests.support.crash import (
    TENANT,
    Backends,
    PowerSwitch,
    SimulatedCrash,
    real_backends,
    request_for,
    worker_runtime,
)
from tests.support.moto_server import S3TestBucket
from tether import SessionLogReader
from tether.core.items import UserMessage
from tether.errors import StoreUnavailable
from tether.keys import RedisKeys
from tether.persistence.headcache.base import CachedHead, HeadCache
from tether.persistence.objects import head_key
from tether.persistence.storage_url import open_storage
from tether.producer.ops.sessions_admin import delete_session
from tether.runs.contract import RunRequest, RunResult
from tether.runs.queue.base import submit
from tether.worker.engine.cycle import drain


class BrokenCache:
    """A head cache that fails where the test says (the rest passes through)."""

    def __init__(self, inner: HeadCache) -> None:
        self.inner = inner
        self.crash_on_put: PowerSwitch | None = None
        self.put_fails = False
        self.drop_fails = False
        self.hits = 0

    def get(self, tenant: str, session_id: str) -> CachedHead | None:
        found = self.inner.get(tenant, session_id)
        self.hits += found is not None
        return found

    def put(
        self, tenant: str, session_id: str, data: bytes, version: str, writer_fence: int
    ) -> bool:
        if self.crash_on_put is not None:
            switch, self.crash_on_put = self.crash_on_put, None
            switch.dead = True
            raise SimulatedCrash("died between the store write and the cache write")
        if self.put_fails:
            raise StoreUnavailable("head cache away (put)")
        return self.inner.put(tenant, session_id, data, version, writer_fence)

    def drop(self, tenant: str, session_id: str) -> None:
        if self.drop_fails:
            raise StoreUnavailable("head cache away (drop)")
        self.inner.drop(tenant, session_id)


def broken(backends: Backends) -> BrokenCache:
    """Put a :class:`BrokenCache` in front of ``backends``' cache (store and runtime alike)."""
    cache = BrokenCache(backends.head_cache)
    backends.store.head_cache = cache
    backends.head_cache = cache
    return cache


def apply(backends: Backends, worker: str, request: RunRequest, **kw: Any) -> int:
    """A worker's ``tether.run``: register the request, drain; how many runs it finished."""
    rt = worker_runtime(backends, worker, **kw)
    submit(rt.runs, request)
    return drain(rt, request.tenant, request.session_id)


def user_inputs(backends: Backends, session_id: str) -> list[str]:
    head = SessionLogReader(backends.store, backends.archive).read(session_id, tenant=TENANT)
    assert head is not None
    return [str(i.content) for i in head.memory.items if isinstance(i, UserMessage)]


def finished(backends: Backends, request: RunRequest) -> RunResult:
    """The run's result (it must have one)."""
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None, request.run_id
    return view.result


def assert_applied_once(backends: Backends, session_id: str, requests: list[RunRequest]) -> None:
    reader = SessionLogReader(backends.store, backends.archive)
    report = reader.verify(session_id, tenant=TENANT)
    assert report.ok, report.problems
    assert user_inputs(backends, session_id) == [r.input for r in requests]
    for request in requests:
        assert finished(backends, request).status == "COMPLETED"


def test_a_warm_session_reads_its_head_from_the_cache(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    cache = broken(backends)
    runs = [request_for("s-warm", text) for text in ("1+1", "2+2", "3+3")]
    for request in runs:
        assert apply(backends, "w", request) == 1
    assert cache.hits == 2  # every run after the first
    assert_applied_once(backends, "s-warm", runs)


def test_death_between_the_store_write_and_the_cache_write_runs_nothing_twice(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    cache = broken(backends)
    sid = "s-died"
    history = [request_for(sid, "1+1")]
    apply(backends, "warm-up", history[0])
    doomed = request_for(sid, "6*7")
    switch = PowerSwitch()
    cache.crash_on_put = switch
    with pytest.raises(SimulatedCrash):
        apply(backends, "w1", doomed, switch=switch)
    # the store holds the doomed run, the cache the head before it
    hit = backends.head_cache.inner.get(TENANT, sid)
    stored = backends.store.blobs.get(head_key(TENANT, sid))
    assert hit is not None and stored is not None and hit.version != stored.token

    backends.expire_lease(TENANT, sid)
    hits = cache.hits
    assert apply(backends, "w2", doomed) == 1  # the redelivered message: one drain finishes it
    assert cache.hits == hits  # the taker read the store, not the entry its predecessor left
    result = finished(backends, doomed)
    assert result.duplicate  # found applied in the head: not run again
    assert result.attempts == 2
    after = request_for(sid, "10-4")
    apply(backends, "w2", after)
    assert_applied_once(backends, sid, [*history, doomed, after])


def test_a_refused_cache_write_drops_the_entry_and_the_run_completes(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    cache = broken(backends)
    sid = "s-refused"
    first, second, third = (request_for(sid, t) for t in ("1+1", "2+2", "3+3"))
    apply(backends, "w", first)
    cache.put_fails = True
    assert apply(backends, "w", second) == 1
    assert cache.inner.get(TENANT, sid) is None  # dropped: the entry held the first head
    cache.put_fails = False
    hits = cache.hits
    assert apply(backends, "w", third) == 1
    assert cache.hits == hits  # read from the store
    assert_applied_once(backends, sid, [first, second, third])


def test_when_the_cache_is_unreachable_the_lease_is_kept_and_expires_into_a_takeover(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    cache = broken(backends)
    sid = "s-away"
    first, second = request_for(sid, "1+1"), request_for(sid, "2+2")
    apply(backends, "w1", first)
    cache.put_fails = cache.drop_fails = True
    # the store write lands, the cache keeps the first head: the drain must not hand over
    assert apply(backends, "w1", second) == 0
    assert backends.leases.holder(TENANT, sid) == "w1"
    assert cache.inner.get(TENANT, sid) is not None
    cache.put_fails = cache.drop_fails = False
    hits = cache.hits
    assert apply(backends, "w2", second) == 0  # held: nobody reads the stale entry
    backends.expire_lease(TENANT, sid)
    if backends.name != "memory":  # the in-memory clock passed the back-off with the lease
        backends.runs.note_failure(second.ref, "test: back-off shortened", retry_after_ms=1)
        time.sleep(0.01)
    rt = worker_runtime(backends, "w2")
    assert drain(rt, TENANT, sid) == 1
    assert cache.hits == hits
    assert finished(backends, second).duplicate
    assert_applied_once(backends, sid, [first, second])


def test_delete_by_a_tool_without_the_cache_still_forgets_the_cached_head(
    redis_client: redis.Redis, s3_bucket: S3TestBucket
) -> None:
    backends = real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
    sid = "s-deleted"
    apply(backends, "w", request_for(sid, "1+1"))
    keys: RedisKeys = backends.stream._keys
    assert redis_client.exists(keys.head_cache(TENANT, sid))
    # the CLI's store: opened from the URL alone, no cache attached
    plain, archive = open_storage(
        f"s3://{s3_bucket.bucket}/{keys.prefix}", endpoint_url=s3_bucket.endpoint_url
    )
    delete_session(plain, archive, redis_client, keys, TENANT, sid)
    assert not redis_client.exists(keys.head_cache(TENANT, sid))
    reborn = request_for(sid, "2+2")
    apply(backends, "w", reborn)
    assert user_inputs(backends, sid) == ["2+2"]  # the deleted incarnation did not come back
