"""Contract of :class:`tether.worker.engine.checkpoints.base.CheckpointStore`: memory and Redis
alike."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from tether.errors import FencedOut, InvalidInput
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.runs.leases.base import LeaseManager
from tether.runs.leases.memory import InMemoryLeaseManager
from tether.runs.leases.redis import RedisLeaseManager
from tether.worker.engine.checkpoints.base import Checkpoint, CheckpointStore
from tether.worker.engine.checkpoints.memory import InMemoryCheckpointStore
from tether.worker.engine.checkpoints.redis import RedisCheckpointStore


@dataclass
class Case:
    store: CheckpointStore
    leases: LeaseManager


@pytest.fixture(params=["memory", "redis", "cluster"])
def case(request: pytest.FixtureRequest) -> Iterator[Case]:
    if request.param == "memory":
        leases = InMemoryLeaseManager()
        yield Case(InMemoryCheckpointStore(leases), leases)
        return
    keys = RedisKeys("ckpt-contract")
    if request.param == "redis":
        client: redis.Redis = request.getfixturevalue("redis_client")
        yield Case(
            RedisCheckpointStore(client, keys, ttl_s=600), RedisLeaseManager(client, keys=keys)
        )
        return
    cluster = redis_from_url(request.getfixturevalue("cluster_url"))
    try:
        yield Case(
            RedisCheckpointStore(cluster, keys, ttl_s=600), RedisLeaseManager(cluster, keys=keys)
        )
    finally:
        cluster.close()


def ckpt(run_id: str, fence: int, last_seq: int, base_seq: int = 0) -> Checkpoint:
    return Checkpoint(run_id=run_id, fence=fence, base_seq=base_seq, last_seq=last_seq)


def test_save_then_load_round_trips(case: Case) -> None:
    lease = case.leases.acquire("t", "s", "w1", 10_000)
    assert lease is not None
    case.store.save("t", "s", ckpt("r1", lease.fence, 7, base_seq=3))
    assert case.store.load("t", "s", "r1") == ckpt("r1", lease.fence, 7, base_seq=3)
    assert case.store.load("t", "s", "r2") is None
    assert case.store.load("t", "other", "r1") is None


def test_a_newer_checkpoint_replaces_the_older(case: Case) -> None:
    lease = case.leases.acquire("t", "s", "w1", 10_000)
    assert lease is not None
    case.store.save("t", "s", ckpt("r1", lease.fence, 7))
    case.store.save("t", "s", ckpt("r1", lease.fence, 12))
    loaded = case.store.load("t", "s", "r1")
    assert loaded is not None and loaded.last_seq == 12


def test_runs_of_one_session_keep_their_own_checkpoints(case: Case) -> None:
    lease = case.leases.acquire("t", "s", "w1", 10_000)
    assert lease is not None
    case.store.save("t", "s", ckpt("r1", lease.fence, 4))
    case.store.save("t", "s", ckpt("r2", lease.fence, 9))
    case.store.clear("t", "s", "r1")
    assert case.store.load("t", "s", "r1") is None
    loaded = case.store.load("t", "s", "r2")
    assert loaded is not None and loaded.last_seq == 9


def test_an_older_fence_is_refused_and_writes_nothing(case: Case) -> None:
    old = case.leases.acquire("t", "s", "w1", 10_000)
    assert old is not None
    case.store.save("t", "s", ckpt("r1", old.fence, 5))
    case.leases.release(old)
    new = case.leases.acquire("t", "s", "w2", 10_000)
    assert new is not None and new.fence > old.fence
    with pytest.raises(FencedOut):
        case.store.save("t", "s", ckpt("r1", old.fence, 50))
    loaded = case.store.load("t", "s", "r1")
    assert loaded is not None and (loaded.fence, loaded.last_seq) == (old.fence, 5)
    case.store.save("t", "s", ckpt("r1", new.fence, 6))  # the new holder goes on
    loaded = case.store.load("t", "s", "r1")
    assert loaded is not None and loaded.fence == new.fence


def test_clear_of_a_missing_checkpoint_is_harmless(case: Case) -> None:
    case.store.clear("t", "s", "never")
    assert case.store.load("t", "s", "never") is None


@pytest.mark.parametrize("bad", ["r/1", "../x", ""])
def test_ids_are_validated(case: Case, bad: str) -> None:
    with pytest.raises(InvalidInput):
        case.store.load("t", "s", bad)
    with pytest.raises(InvalidInput):
        case.store.load(bad or "x/y", "s", "r1")
