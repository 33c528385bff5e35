"""Contract of :class:`tether.runs.signals.base.SignalMailbox`: memory, a redis-server and the
3-master Redis Cluster alike (the mailbox and the session's wait records share a slot, so the
send is one script there too)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from tether.core.waits import WaitFor
from tether.errors import InvalidInput
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.runs.signals import base
from tether.runs.signals.base import SignalMailbox, wake_of
from tether.runs.signals.memory import InMemorySignalMailbox
from tether.runs.signals.redis import RedisSignalMailbox
from tether.runs.waits.base import WaitIndex, WaitRecord, wake_request_id
from tether.runs.waits.memory import InMemoryWaitIndex
from tether.runs.waits.redis import RedisWaitIndex


@dataclass
class Case:
    mailbox: SignalMailbox
    waits: WaitIndex


@pytest.fixture(params=["memory", "redis", "cluster"])
def case(request: pytest.FixtureRequest) -> Iterator[Case]:
    if request.param == "memory":
        waits = InMemoryWaitIndex()
        yield Case(InMemorySignalMailbox(waits), waits)
        return
    keys = RedisKeys("signals-contract")
    if request.param == "redis":
        client: redis.Redis = request.getfixturevalue("redis_client")
        yield Case(RedisSignalMailbox(client, keys), RedisWaitIndex(client, keys))
        return
    cluster = redis_from_url(request.getfixturevalue("cluster_url"))
    try:
        yield Case(RedisSignalMailbox(cluster, keys), RedisWaitIndex(cluster, keys))
    finally:
        cluster.close()


def _send(case: Case, session_id: str, name: str, payload: Any) -> str:
    return case.mailbox.send("t1", session_id, name, json.dumps(payload), sent_at_ms=1).signal_id


def test_signals_are_read_in_send_order_per_name(case: Case) -> None:
    first = _send(case, "s1", "go", 1)
    _send(case, "s1", "stop", "x")
    second = _send(case, "s1", "go", 2)
    got = case.mailbox.first_after("t1", "s1", "go", None)
    assert got is not None and (got.id, got.payload) == (first, 1)
    got = case.mailbox.first_after("t1", "s1", "go", first)
    assert got is not None and (got.id, got.payload) == (second, 2)
    assert case.mailbox.first_after("t1", "s1", "go", second) is None
    assert case.mailbox.first_after("t1", "s2", "go", None) is None  # another session's


def test_forget_drops_only_what_was_consumed(case: Case) -> None:
    first = _send(case, "s1", "go", 1)
    _send(case, "s1", "go", 2)
    other = _send(case, "s1", "stop", 3)
    case.mailbox.forget("t1", "s1", {"go": first})
    got = case.mailbox.first_after("t1", "s1", "go", None)
    assert got is not None and got.payload == 2
    got = case.mailbox.first_after("t1", "s1", "stop", None)
    assert got is not None and got.id == other


def test_a_send_reads_the_sessions_waits_and_names_the_wake(case: Case) -> None:
    record = WaitRecord(
        tenant="t1",
        session_id="s1",
        call_id="c1",
        run_id="r1",
        agent="listener",
        wait_for=WaitFor(kind="signal", name="go"),
    )
    case.waits.park([record])
    sent = case.mailbox.send("t1", "s1", "stop", "1", sent_at_ms=1)
    assert sent.waiting == [record] and wake_of(sent, "stop") is None
    sent = case.mailbox.send("t1", "s1", "go", "1", sent_at_ms=1)
    wake = wake_of(sent, "go")
    assert wake is not None and wake.request_id == wake_request_id("t1", "s1", "c1")
    assert wake.resolutions[0].action == "signal"


def test_a_full_mailbox_refuses_and_writes_nothing(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "MAX_SIGNALS_PER_SESSION", 2)
    for module in ("memory", "redis"):
        monkeypatch.setattr(f"tether.runs.signals.{module}.MAX_SIGNALS_PER_SESSION", 2)
    _send(case, "s1", "go", 1)
    last = _send(case, "s1", "go", 2)
    with pytest.raises(InvalidInput, match="MAX_SIGNALS_PER_SESSION"):
        _send(case, "s1", "go", 3)
    assert case.mailbox.first_after("t1", "s1", "go", last) is None
