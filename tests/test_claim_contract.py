"""Contract of :class:`tether.worker.engine.claim.Claimer`: the one-script Redis claimer does what
the
reference (the same steps as separate seam calls) does, on memory, a redis-server and a
3-master Redis Cluster (the script reads the head run's keys, in the session's slot: a
cross-slot access would fail the cluster case).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from tether.keys import RedisKeys
from tether.persistence.headcache import HeadCache, InMemoryHeadCache, RedisHeadCache
from tether.persistence.headcache.base import CachedHead
from tether.persistence.redis_conn import redis_from_url
from tether.runs.contract import BusyPolicy, RunRef, RunRequest
from tether.runs.leases.base import LeaseManager
from tether.runs.leases.memory import InMemoryLeaseManager
from tether.runs.leases.redis import RedisLeaseManager
from tether.runs.queue.base import (
    CancelOutcome,
    RunQueue,
    RunState,
    SubmitOutcome,
    SubmitState,
    submit,
)
from tether.runs.queue.memory import InMemoryRunQueue
from tether.runs.queue.redis import RedisRunQueue
from tether.worker.engine.checkpoints.base import Checkpoint, CheckpointStore
from tether.worker.engine.checkpoints.memory import InMemoryCheckpointStore
from tether.worker.engine.checkpoints.redis import RedisCheckpointStore
from tether.worker.engine.claim import Carried, Claim, Claimer, SequentialClaimer
from tether.worker.engine.claim_redis import RedisClaimer

T = "acme"
_serial = itertools.count(1)


@dataclass
class Case:
    kind: str
    claimer: Claimer
    runs: RunQueue
    leases: LeaseManager
    checkpoints: CheckpointStore
    head_cache: HeadCache

    def claim(self, session: str, carried: RunRequest | None = None, **kw: object) -> Claim:
        ttl_ms = int(kw.pop("ttl_ms", 60_000))  # type: ignore[call-overload]
        owner = str(kw.pop("owner", "w-1"))
        box = Carried(carried, "q") if carried is not None else None
        expect = kw.pop("expect", None)
        assert expect is None or isinstance(expect, str)
        return self.claimer.claim(
            T, session, owner=owner, ttl_ms=ttl_ms, carried=box, expect=expect
        )


@pytest.fixture(params=["memory", "redis-sequential", "redis", "cluster"])
def case(request: pytest.FixtureRequest) -> Iterator[Case]:
    """The reference on memory and on Redis, and the one-script claimer on Redis and Cluster."""
    if request.param == "memory":
        leases = InMemoryLeaseManager()
        runs = InMemoryRunQueue(leases)
        checkpoints = InMemoryCheckpointStore(leases)
        cache: HeadCache = InMemoryHeadCache(leases.current_fence, ttl_ms=60_000, max_bytes=4096)
        claimer = SequentialClaimer(runs, leases, checkpoints, cache)
        yield Case("memory", claimer, runs, leases, checkpoints, cache)
        return
    client: redis.Redis
    if request.param == "cluster":
        client = redis_from_url(request.getfixturevalue("cluster_url"))
    else:
        client = request.getfixturevalue("redis_client")
    keys = RedisKeys(f"claim-{next(_serial)}")
    rruns = RedisRunQueue(client, keys, result_ttl_s=3600)
    rleases = RedisLeaseManager(client, keys=keys)
    rcheckpoints = RedisCheckpointStore(client, keys, ttl_s=3600)
    rcache = RedisHeadCache(client, keys, ttl_ms=60_000, max_bytes=4096)
    claimer: Claimer = (
        SequentialClaimer(rruns, rleases, rcheckpoints, rcache)
        if request.param == "redis-sequential"
        else RedisClaimer(client, keys, rruns, head_cache=True)
    )
    try:
        yield Case(request.param, claimer, rruns, rleases, rcheckpoints, rcache)
    finally:
        if request.param == "cluster":
            client.close()


def session() -> str:
    return f"s-{next(_serial)}"


def req(sid: str, *, request_id: str | None = None, run_id: str | None = None,
        on_busy: BusyPolicy = BusyPolicy.ENQUEUE) -> RunRequest:  # fmt: skip
    run_id = run_id or f"run-{next(_serial)}"
    return RunRequest(
        run_id=run_id,
        request_id=request_id or f"req-{run_id}",
        tenant=T,
        session_id=sid,
        agent="echo",
        input=f"input of {run_id}",
        on_busy=on_busy,
    )


def test_a_carried_request_is_registered_leased_and_begun_at_once(case: Case) -> None:
    sid = session()
    request = req(sid)
    claim = case.claim(sid, request)
    assert claim.submitted == SubmitOutcome(request.run_id, SubmitState.QUEUED)
    assert claim.lease is not None and claim.lease.fence == 1 and not claim.lease.takeover
    assert claim.head == request.run_id
    assert claim.view is not None and claim.view.request == request
    assert claim.view.status == RunState.QUEUED.value  # as read, before the claim began it
    assert claim.attempts == 1 and claim.begun and not claim.cancelled
    assert claim.checkpoint is None
    after = case.runs.get(request.ref)
    assert after is not None and after.status == RunState.RUNNING.value
    # a fresh registration is findable by bare run id, like any submit
    assert case.runs.locate(T, request.run_id) == request.ref
    assert case.runs.pending_count(T, sid) == 1  # begun, not popped: finish pops it


def test_a_claim_expecting_a_run_nobody_registered_takes_nothing(case: Case) -> None:
    # #47: a registered-only wake-up checks the registration in the claim's own round trip
    sid = session()
    request = req(sid)
    submit(case.runs, request)
    claim = case.claim(sid, expect="run-never-registered")
    assert claim.unregistered and claim.lease is None and claim.head is None
    assert case.leases.holder(T, sid) is None  # no lease taken, no fence counted
    view = case.runs.get(request.ref)
    assert view is not None and view.status == RunState.QUEUED.value  # nothing begun
    claim = case.claim(sid, expect=request.run_id)
    assert not claim.unregistered and claim.lease is not None and claim.lease.fence == 1
    assert claim.head == request.run_id and claim.begun


def test_a_held_lease_registers_the_request_and_reads_nothing(case: Case) -> None:
    sid = session()
    first, second = req(sid), req(sid)
    assert case.claim(sid, first).lease is not None
    claim = case.claim(sid, second, owner="w-2")
    assert claim.lease is None and claim.head is None and claim.view is None
    assert claim.submitted == SubmitOutcome(second.run_id, SubmitState.QUEUED)
    assert case.runs.pending_count(T, sid) == 2
    view = case.runs.get(second.ref)
    assert view is not None and view.status == RunState.QUEUED.value  # not begun


def test_a_redelivered_request_is_a_duplicate_and_counts_another_attempt(case: Case) -> None:
    sid = session()
    request = req(sid)
    first = case.claim(sid, request)
    assert first.lease is not None
    case.leases.release(first.lease)  # as after a worker died and its lease was freed
    again = case.claim(sid, request)
    assert again.submitted == SubmitOutcome(request.run_id, SubmitState.DUPLICATE)
    assert again.lease is not None and again.lease.fence == 2
    assert again.head == request.run_id and again.attempts == 2
    assert case.runs.pending_count(T, sid) == 1


def test_nothing_carried_on_an_idle_session_takes_the_lease_only(case: Case) -> None:
    sid = session()
    claim = case.claim(sid)
    assert claim.submitted is None
    assert claim.lease is not None and claim.head is None and claim.attempts is None


def test_a_run_cancelled_while_queued_is_not_begun(case: Case) -> None:
    sid = session()
    request = req(sid)
    assert case.runs.submit_many([request])[0].state is SubmitState.QUEUED
    assert case.runs.request_cancel(request.ref) is CancelOutcome.CANCELLED
    claim = case.claim(sid)
    assert claim.head == request.run_id and claim.cancelled and not claim.begun
    view = case.runs.get(request.ref)
    assert view is not None and view.status == RunState.QUEUED.value


def test_a_run_in_retry_backoff_is_not_begun(case: Case) -> None:
    sid = session()
    request = req(sid)
    case.runs.submit_many([request])
    case.runs.note_failure(request.ref, "StoreUnavailable: down", retry_after_ms=60_000)
    claim = case.claim(sid)
    assert claim.head == request.run_id and not claim.begun and not claim.cancelled
    assert claim.view is not None and claim.view.retry_at_ms > 0
    assert claim.view.last_error == "StoreUnavailable: down"


def test_the_head_runs_checkpoint_comes_with_the_claim(case: Case) -> None:
    sid = session()
    request, later = req(sid), req(sid)
    first = case.claim(sid, request)
    assert first.lease is not None
    case.runs.submit_many([later])
    saved = Checkpoint(run_id=request.run_id, fence=first.lease.fence, base_seq=3, last_seq=9)
    case.checkpoints.save(T, sid, saved)
    other = Checkpoint(run_id=later.run_id, fence=first.lease.fence, base_seq=3, last_seq=5)
    case.checkpoints.save(T, sid, other)
    case.leases.release(first.lease)
    claim = case.claim(sid)
    assert claim.head == request.run_id and claim.checkpoint == saved  # the head's, not later's
    assert claim.attempts == 2


def test_an_expired_grant_is_a_takeover(case: Case) -> None:
    sid = session()
    first = case.claim(sid, req(sid), ttl_ms=100)
    assert first.lease is not None
    time.sleep(0.25)
    claim = case.claim(sid, owner="w-2")
    assert claim.lease is not None and claim.lease.takeover and claim.lease.fence == 2


def test_a_run_id_of_another_request_is_taken_and_a_busy_reject_is_refused(case: Case) -> None:
    sid = session()
    request = req(sid)
    case.runs.submit_many([request])
    thief = req(sid, run_id=request.run_id, request_id="another-request")
    claim = case.claim(sid, thief)
    assert claim.submitted == SubmitOutcome(request.run_id, SubmitState.TAKEN)
    assert claim.lease is not None and claim.head == request.run_id  # the queue is drained
    case.leases.release(claim.lease)
    rejecting = req(sid, on_busy=BusyPolicy.REJECT)
    refused = case.claim(sid, rejecting)
    assert refused.submitted == SubmitOutcome(rejecting.run_id, SubmitState.BUSY)
    assert case.runs.get(RunRef(T, sid, rejecting.run_id)) is None
    assert case.runs.pending_count(T, sid) == 1


def test_the_claim_reads_the_cached_head_and_counts_the_queue(case: Case) -> None:
    sid = session()
    first, second = req(sid), req(sid)
    case.runs.submit_many([first, second])
    writer = case.leases.acquire(T, sid, "w-0", 60_000)
    assert writer is not None
    assert case.head_cache.put(T, sid, b"head bytes", "v7", writer.fence)
    assert case.leases.release(writer)
    claim = case.claim(sid)
    assert claim.lease is not None and not claim.lease.takeover
    assert claim.cache_read and claim.cached_head == CachedHead(b"head bytes", "v7")
    assert claim.queued == 2 and claim.head == first.run_id


def test_a_claim_finds_no_cached_head_when_none_was_left(case: Case) -> None:
    sid = session()
    case.runs.submit_many([req(sid)])
    claim = case.claim(sid)
    assert claim.cache_read and claim.cached_head is None and claim.queued == 1


def test_a_takeover_claim_drops_the_cached_head_and_does_not_use_it(case: Case) -> None:
    # the expired holder may have written a newer head to the store and died before caching it
    sid = session()
    case.runs.submit_many([req(sid)])
    first = case.claim(sid, ttl_ms=100)
    assert first.lease is not None
    assert case.head_cache.put(T, sid, b"maybe stale", "v1", first.lease.fence)
    time.sleep(0.25)
    claim = case.claim(sid, owner="w-2")
    assert claim.lease is not None and claim.lease.takeover
    assert claim.cache_read and claim.cached_head is None
    assert case.head_cache.get(T, sid) is None
