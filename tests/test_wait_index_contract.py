"""Contract of :class:`tether.runs.waits.base.WaitIndex`: memory, a redis-server and the
3-master Redis Cluster pass the same tests (park, settle, take each due member once)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import cast

import pytest

from tests.support.protocols import assert_conforms
from tether.core.events import now_ms
from tether.core.waits import WaitFor
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.runs.waits.base import REDELIVER_MS, TimerMember, WaitIndex, WaitRecord
from tether.runs.waits.memory import InMemoryWaitIndex
from tether.runs.waits.redis import RedisWaitIndex
from tether.worker.engine.services import EngineServices
from tether.worker.engine.wakes import NextPass, next_pass

NOW_MS = 1_800_000_000_000


@pytest.fixture(params=["memory", "redis", "cluster"])
def index(request: pytest.FixtureRequest) -> Iterator[WaitIndex]:
    if request.param == "memory":
        yield InMemoryWaitIndex()
        return
    url_fixture = "cluster_url" if request.param == "cluster" else "redis_url"
    client = redis_from_url(request.getfixturevalue(url_fixture))
    try:
        yield RedisWaitIndex(client, RedisKeys("tether-test"))
    finally:
        client.close()


def record(session_id: str, call_id: str = "call_1", due_ms: int = NOW_MS) -> WaitRecord:
    return WaitRecord(
        tenant="acme",
        session_id=session_id,
        call_id=call_id,
        run_id=f"run-{session_id}",
        agent="sleeper",
        wait_for=WaitFor(kind="timer", due_at_ms=due_ms),
    )


def test_conforms(index: WaitIndex) -> None:
    assert_conforms(index, WaitIndex)


def test_a_parked_call_is_recorded_and_taken_when_due_once(index: WaitIndex) -> None:
    r = record("s-1", "call/with/slashes")
    index.park([r])
    assert index.records("acme", "s-1") == [r]
    assert index.recorded([("acme", "s-1"), ("acme", "s-2")]) == [True, False]
    assert index.take_due(NOW_MS - 1) == []  # not due yet
    assert index.take_due(NOW_MS) == [r.member]
    assert index.take_due(NOW_MS) == []  # taken: nobody else gets it
    assert index.get_many([r.member]) == [r]
    assert index.counts() == {"timers": 1}


def test_a_taken_member_comes_due_again_unless_done(index: WaitIndex) -> None:
    a, b = record("s-a"), record("s-b")
    index.park([a, b])
    assert set(index.take_due(NOW_MS)) == {a.member, b.member}
    index.done([a.member])
    assert index.take_due(NOW_MS + REDELIVER_MS) == [b.member]  # its taker died: again
    assert index.get_many([a.member])[0] == a  # done drops the member, not the record


def test_parking_again_keeps_a_taken_members_later_time(index: WaitIndex) -> None:
    r = record("s-1")
    index.park([r])
    assert index.take_due(NOW_MS) == [r.member]
    index.park([r])  # a repark (a run finished as found) must not make it due at once again
    assert index.take_due(NOW_MS) == []


def test_settling_forgets_the_call(index: WaitIndex) -> None:
    r1, r2 = record("s-1", "c1"), record("s-1", "c2")
    index.park([r1, r2])
    index.settle("acme", "s-1", ["c1"])
    assert index.records("acme", "s-1") == [r2]
    assert index.get_many([r1.member]) == [None]
    assert index.take_due(NOW_MS) == [r2.member]


def test_a_wait_without_a_time_is_recorded_but_never_due(index: WaitIndex) -> None:
    r = record("s-1").model_copy(update={"wait_for": WaitFor(kind="signal", name="approve")})
    index.park([r])
    assert index.records("acme", "s-1") == [r]
    assert index.take_due(2**52) == []


def test_many_takers_take_each_due_member_once(index: WaitIndex) -> None:
    index.park([record(f"s-{n}") for n in range(300)])
    taken: list[TimerMember] = []
    lock = threading.Lock()

    def take() -> None:
        while got := index.take_due(NOW_MS, limit=7):
            with lock:
                taken.extend(got)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(taken) == 300 and len(set(taken)) == 300


def test_a_member_names_its_call() -> None:
    m = TimerMember("acme", "s-1", "call/x")
    assert TimerMember.parse(m.text()) == m
    assert TimerMember.parse("nonsense") is None


def test_the_next_due_time_is_the_earliest_member(index: WaitIndex) -> None:
    assert index.next_due_ms() is None
    index.park([record("s-1", due_ms=NOW_MS + 5), record("s-2", due_ms=NOW_MS + 2)])
    assert index.next_due_ms() == NOW_MS + 2


def test_a_lost_index_is_seen_once(index: WaitIndex) -> None:
    assert index.lost() is True  # a fresh index: nothing says it was ever written
    assert index.lost() is False
    assert index.lost() is False


@pytest.mark.parametrize("url_fixture", ["redis_url", "cluster_url"])
def test_a_redis_gone_back_to_an_older_state_is_seen_lost(
    url_fixture: str, request: pytest.FixtureRequest
) -> None:
    """A rollback keeps the epoch (it was in the snapshot) but an older one: the first index
    to look after it that wrote a newer one sees the loss, once."""
    client = redis_from_url(request.getfixturevalue(url_fixture))
    keys = RedisKeys("tether-test")
    try:
        seen, other = RedisWaitIndex(client, keys), RedisWaitIndex(client, keys)
        assert seen.lost() is True  # fresh
        epoch = keys.timer_shards()[0] + ":sentinel"
        snapshot = client.get(epoch)
        assert other.lost() is False and seen.lost() is False
        client.set(epoch, snapshot or b"")  # what a restored snapshot holds: an older epoch
        assert seen.lost() is True
        assert seen.lost() is False and other.lost() is False
    finally:
        client.close()


def test_one_owner_reconciles_per_period(index: WaitIndex) -> None:
    assert index.take_reconcile("w1", 60_000) is True
    assert index.take_reconcile("w2", 60_000) is False
    assert index.take_reconcile("w1", 60_000) is False  # its own turn is taken too


def test_the_timers_thread_takes_only_when_a_member_is_due_by_its_next_pass(
    index: WaitIndex,
) -> None:
    """An idle fleet probes the index (one read per shard) and runs no take script; a member
    due within the pass interval, or taken and not done (its redelivery), is taken on time."""
    services = cast(EngineServices, SimpleNamespace(waits=index))
    assert next_pass(services, 1.0) == NextPass(1.0, take=False)  # nothing parked
    later = record("s-later", due_ms=now_ms() + 60_000)
    index.park([later])
    assert next_pass(services, 1.0) == NextPass(1.0, take=False)  # due after the pass
    soon = record("s-soon", due_ms=now_ms() + 300)
    index.park([soon])
    upcoming = next_pass(services, 1.0)
    assert upcoming.take and 0 < upcoming.pause_s <= 0.3
    assert index.take_due(now_ms() + 300) == [soon.member]  # taken, its taker dies
    assert next_pass(services, 1.0) == NextPass(1.0, take=False)  # redelivered a minute on
    index.done([soon.member])
    assert next_pass(services, 61.0).take  # "later" is due within a 61 s pass
