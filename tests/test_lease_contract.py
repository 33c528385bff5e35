"""Contract of :class:`tether.runs.leases.base.LeaseManager`: memory and Redis pass the same
tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from tests.support.protocols import assert_conforms
from tether.errors import InvalidId, InvalidInput
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.runs.leases import InMemoryLeaseManager, RedisLeaseManager
from tether.runs.leases.base import Lease, LeaseManager

T = "acme"
S = "s-1"
R = TypeVar("R")


@pytest.fixture(params=["memory", "redis", "cluster"])
def leases(request: pytest.FixtureRequest) -> Iterator[LeaseManager]:
    if request.param == "memory":
        yield InMemoryLeaseManager()
        return
    url_fixture = "cluster_url" if request.param == "cluster" else "redis_url"
    client = redis_from_url(request.getfixturevalue(url_fixture))
    try:
        yield RedisLeaseManager(client, keys=RedisKeys("tether-test"))
    finally:
        client.close()


def poll(fn: Callable[[], R | None], *, timeout_s: float = 5.0, interval_s: float = 0.01) -> R:
    """Call ``fn`` until it returns something other than None, or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)


def test_lease_is_exclusive(leases: LeaseManager) -> None:
    assert_conforms(leases, LeaseManager)
    assert leases.holder(T, S) is None
    assert leases.current_fence(T, S) == 0
    lease = leases.acquire(T, S, "worker-a", 10_000)
    assert lease == Lease(T, S, "worker-a", 1)
    assert leases.acquire(T, S, "worker-b", 10_000) is None
    assert leases.acquire(T, S, "worker-a", 10_000) is None  # not re-entrant: use renew
    assert leases.holder(T, S) == "worker-a"
    assert leases.current_fence(T, S) == 1
    # Other sessions and tenants are independent.
    other = leases.acquire(T, "s-2", "worker-b", 10_000)
    assert other is not None and other.fence == 1
    elsewhere = leases.acquire("other", S, "worker-b", 10_000)
    assert elsewhere is not None and elsewhere.fence == 1


def test_lease_expires_after_ttl(leases: LeaseManager) -> None:
    started = time.monotonic()
    lease = leases.acquire(T, S, "worker-a", 200)
    assert lease is not None
    taken = poll(lambda: leases.acquire(T, S, "worker-b", 10_000))
    assert time.monotonic() - started >= 0.15  # not before the TTL (minus clock granularity)
    assert taken.fence == lease.fence + 1
    assert leases.holder(T, S) == "worker-b"
    assert not leases.renew(lease, 10_000)  # the expired grant cannot come back


def test_expired_lease_has_no_holder(leases: LeaseManager) -> None:
    assert leases.acquire(T, S, "worker-a", 100) is not None
    poll(lambda: True if leases.holder(T, S) is None else None)
    assert leases.current_fence(T, S) == 1  # expiry does not grant anything


def test_renew_extends(leases: LeaseManager) -> None:
    lease = leases.acquire(T, S, "worker-a", 200)
    assert lease is not None
    assert leases.renew(lease, 60_000)
    # Well past the original TTL, the lease is still held.
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        assert leases.acquire(T, S, "worker-b", 10_000) is None
        time.sleep(0.02)
    assert leases.holder(T, S) == "worker-a"
    # Renewing with a short TTL makes it expire soon.
    assert leases.renew(lease, 100)
    poll(lambda: leases.acquire(T, S, "worker-b", 10_000))


def test_stale_grant_cannot_renew_or_release(leases: LeaseManager) -> None:
    first = leases.acquire(T, S, "worker-a", 100)
    assert first is not None
    # The same owner gets the lease again after expiry: a new grant with a new fence.
    second = poll(lambda: leases.acquire(T, S, "worker-a", 10_000))
    assert second.fence == first.fence + 1
    assert not leases.release(first)
    assert not leases.renew(first, 10_000)
    assert leases.holder(T, S) == "worker-a"
    assert leases.release(second)
    assert leases.holder(T, S) is None
    assert not leases.release(second)  # releasing twice is refused
    # A lease naming another owner with the current fence is not the grant either.
    third = leases.acquire(T, S, "worker-b", 10_000)
    assert third is not None
    assert not leases.release(Lease(T, S, "worker-c", third.fence))
    assert leases.holder(T, S) == "worker-b"


def test_fence_strictly_increases_per_grant(leases: LeaseManager) -> None:
    fences = []
    for i in range(5):
        lease = leases.acquire(T, S, f"worker-{i}", 10_000)
        assert lease is not None
        fences.append(lease.fence)
        assert leases.current_fence(T, S) == lease.fence
        assert leases.release(lease)
    assert fences == [1, 2, 3, 4, 5]
    assert leases.current_fence(T, S) == 5  # release does not reset the counter


def test_takeover_only_after_an_unreleased_grant_expired(leases: LeaseManager) -> None:
    first = leases.acquire(T, S, "worker-a", 10_000)
    assert first is not None and not first.takeover  # nobody held it before
    assert leases.release(first)
    clean = leases.acquire(T, S, "worker-b", 50)
    assert clean is not None and not clean.takeover  # the previous grant was released
    # worker-b never releases: its grant expires while it may still be running (a zombie)
    taken = poll(lambda: leases.acquire(T, S, "worker-c", 10_000))
    assert taken.takeover
    assert taken.fence == clean.fence + 1
    assert not leases.release(clean)  # the zombie's late release neither frees nor marks it
    assert not leases.abandoned(T, S)  # held by the taker
    assert leases.release(taken)
    assert not leases.abandoned(T, S)  # released
    after = leases.acquire(T, S, "worker-d", 50)
    assert after is not None and not after.takeover
    poll(lambda: leases.abandoned(T, S) or None)  # expired without a release
    assert not leases.abandoned(T, "never-leased")


def test_only_one_of_racing_acquirers_wins(leases: LeaseManager) -> None:
    barrier = threading.Barrier(8)
    won: list[Lease] = []
    lock = threading.Lock()

    def contend(i: int) -> None:
        barrier.wait()
        lease = leases.acquire(T, S, f"worker-{i}", 10_000)
        if lease is not None:
            with lock:
                won.append(lease)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(won) == 1
    assert leases.holder(T, S) == won[0].owner


def test_owner_with_separator_round_trips(leases: LeaseManager) -> None:
    lease = leases.acquire(T, S, "host|pid:42", 10_000)
    assert lease is not None
    assert leases.holder(T, S) == "host|pid:42"
    assert leases.release(lease)


def test_invalid_arguments(leases: LeaseManager) -> None:
    with pytest.raises(InvalidInput, match="ttl_ms"):
        leases.acquire(T, S, "worker-a", 0)
    with pytest.raises(InvalidInput, match="owner"):
        leases.acquire(T, S, "", 1000)
    with pytest.raises(InvalidId):
        leases.acquire(T, "../etc", "worker-a", 1000)
    with pytest.raises(InvalidId):
        leases.current_fence("bad tenant", S)
    lease = leases.acquire(T, S, "worker-a", 1000)
    assert lease is not None
    with pytest.raises(InvalidInput, match="ttl_ms"):
        leases.renew(lease, -5)
    assert leases.current_fence(T, S) == 1
