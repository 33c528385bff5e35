"""The lease renewer: one thread per process keeps every lease its drains hold, on a real
redis-server (and the in-memory manager); it survives a fork and reports a lost lease."""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.stack import eventually
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.runs.leases import InMemoryLeaseManager, RedisLeaseManager
from tether.runs.leases.base import Lease, LeaseManager
from tether.worker.engine import lease_keeper
from tether.worker.engine.lease_keeper import LeaseKeeper, LeaseRenewer

T = "acme"
TTL_MS = 300
#: The forked child's lease: a child forked from the busy pytest process starts its renewer late
#: on a loaded machine (a 300 ms TTL was lost there once: a starved child, not a wrong keeper).
FORKED_TTL_MS = 1500
NAMESPACE = "tether-test-keeper"


@pytest.fixture(params=["memory", "redis"])
def leases(request: pytest.FixtureRequest) -> Iterator[LeaseManager]:
    if request.param == "memory":
        yield InMemoryLeaseManager()
        return
    client = redis_from_url(request.getfixturevalue("redis_url"))
    try:
        yield RedisLeaseManager(client, keys=RedisKeys(NAMESPACE))
    finally:
        client.close()


def _acquire(leases: LeaseManager, session_id: str, owner: str = "w-1") -> Lease:
    lease = leases.acquire(T, session_id, owner, TTL_MS)
    assert lease is not None
    return lease


def _renewer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tether-lease-renewer"]


def test_renews_every_lease_from_one_thread(leases: LeaseManager) -> None:
    renewer = LeaseRenewer()
    held = [_acquire(leases, f"s-{i}") for i in range(5)]
    before = len(_renewer_threads())
    keepers = [LeaseKeeper(leases, lease, TTL_MS, renewer=renewer).start() for lease in held]
    time.sleep(3 * TTL_MS / 1000)  # three TTLs: without renewals every lease would be gone
    assert [leases.holder(T, lease.session_id) for lease in held] == ["w-1"] * 5
    assert not any(k.lost for k in keepers)
    assert renewer.renewals >= 5 * 6  # every lease, every third of its TTL (9 each, give or take)
    assert len(_renewer_threads()) == before + 1
    for keeper in keepers:
        keeper.stop()
    assert len(renewer) == 0


def test_a_stopped_lease_is_no_longer_renewed(leases: LeaseManager) -> None:
    renewer = LeaseRenewer()
    kept, dropped = _acquire(leases, "s-kept"), _acquire(leases, "s-dropped")
    keep = LeaseKeeper(leases, kept, TTL_MS, renewer=renewer).start()
    drop = LeaseKeeper(leases, dropped, TTL_MS, renewer=renewer).start()
    time.sleep(TTL_MS / 1000)
    drop.stop()
    assert not renewer.holds(drop) and renewer.holds(keep)
    eventually(lambda: leases.holder(T, "s-dropped") is None, timeout_s=5 * TTL_MS / 1000)
    assert leases.holder(T, "s-kept") == "w-1"
    assert not drop.lost  # expiring after its stop is what stop asked for, not a loss
    keep.stop()


def test_a_released_lease_is_reported_lost_once_and_dropped(
    leases: LeaseManager, caplog: pytest.LogCaptureFixture
) -> None:
    renewer = LeaseRenewer()
    lease = _acquire(leases, "s-taken")
    with caplog.at_level(logging.WARNING, logger=lease_keeper.__name__):
        keeper = LeaseKeeper(leases, lease, TTL_MS, renewer=renewer).start()
        assert leases.release(lease)
        assert leases.acquire(T, "s-taken", "w-2", TTL_MS) is not None  # another worker has it
        eventually(lambda: keeper.lost, timeout_s=2 * TTL_MS / 1000)
        # the renewer thread sets ``lost`` first (the run stops writing at once), then drops
        # the keeper and logs: wait for the log line too (under load the test got in between)
        eventually(lambda: caplog.records, timeout_s=2 * TTL_MS / 1000)
    assert not renewer.holds(keeper)
    assert [r.getMessage() for r in caplog.records] == [f"lease on {T}/s-taken lost"]
    assert leases.holder(T, "s-taken") == "w-2"


def test_renewals_failing_for_a_whole_ttl_are_a_loss(redis_url: str) -> None:
    """Redis gone (a port nothing listens on): the renewer gives the lease up after a TTL of
    failures, and its thread lives on to renew the next lease."""
    dead = redis_from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.05)
    renewer = LeaseRenewer()
    failing = LeaseKeeper(
        RedisLeaseManager(dead, keys=RedisKeys(NAMESPACE)),
        Lease(T, "s-gone", "w-1", fence=1),
        TTL_MS,
        renewer=renewer,
    ).start()
    started = time.monotonic()
    eventually(lambda: failing.lost, timeout_s=20 * TTL_MS / 1000)
    assert time.monotonic() - started >= TTL_MS / 1000
    assert not renewer.holds(failing)
    live_client = redis_from_url(redis_url)
    live = RedisLeaseManager(live_client, keys=RedisKeys(NAMESPACE))
    keeper = LeaseKeeper(live, _acquire(live, "s-alive"), TTL_MS, renewer=renewer).start()
    time.sleep(2 * TTL_MS / 1000)
    assert not keeper.lost and live.holder(T, "s-alive") == "w-1"
    keeper.stop()
    live_client.close()


def _child_keeps_its_own(
    redis_url: str, parent_renewer_id: int, out: multiprocessing.Queue
) -> None:  # type: ignore[type-arg]
    mine = lease_keeper.renewer()
    client = redis_from_url(redis_url)
    leases = RedisLeaseManager(client, keys=RedisKeys(NAMESPACE))
    lease = leases.acquire(T, "s-child", "child", FORKED_TTL_MS)
    assert lease is not None
    keeper = LeaseKeeper(leases, lease, FORKED_TTL_MS).start()
    time.sleep(3 * FORKED_TTL_MS / 1000)
    out.put(
        {
            "fresh_renewer": id(mine) != parent_renewer_id,
            "inherited_leases": len(mine) - 1,
            "held": leases.holder(T, "s-child"),
            "lost": keeper.lost,
        }
    )
    keeper.stop()


def test_a_forked_child_renews_its_own_leases_not_its_parents(redis_url: str) -> None:
    client = redis_from_url(redis_url)
    leases = RedisLeaseManager(client, keys=RedisKeys(NAMESPACE))
    parent = LeaseKeeper(leases, _acquire(leases, "s-parent", owner="parent"), TTL_MS).start()
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(
        target=_child_keeps_its_own, args=(redis_url, id(lease_keeper.renewer()), out)
    )
    child.start()
    report = out.get(timeout=30)
    child.join(timeout=30)
    assert child.exitcode == 0
    assert report == {"fresh_renewer": True, "inherited_leases": 0, "held": "child", "lost": False}
    assert leases.holder(T, "s-parent") == "parent" and not parent.lost
    parent.stop()
    client.close()
