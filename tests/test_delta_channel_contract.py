"""Contract of :class:`tether.persistence.deltas.base.DeltaChannel`: the in-memory channel, a
redis-server and a 3-master Redis Cluster pass the same tests (order, the current step from its
first piece, following, the MAXLEN bound, the expiry, isolation)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.support.protocols import assert_conforms
from tests.support.stack import eventually
from tether.errors import InvalidId, InvalidInput
from tether.keys import RedisKeys
from tether.persistence.deltas import InMemoryDeltaChannel, LiveDelta, RedisDeltaChannel
from tether.persistence.deltas.base import START, DeltaChannel
from tether.persistence.redis_conn import redis_from_url

T = "acme"
S = "s-1"
#: Redis trims ``MAXLEN ~`` by whole stream nodes (stream-node-max-entries, 100 by default).
NODE_SLACK = 100


@dataclass
class Backend:
    make: Callable[..., DeltaChannel]  # make(max_len=..., ttl_ms=...) on the same data

    @property
    def channel(self) -> DeltaChannel:
        return self.make()


@pytest.fixture(params=["memory", "redis", "cluster"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        shared: dict[tuple[int, int], InMemoryDeltaChannel] = {}

        def make_memory(max_len: int = 10_000, ttl_ms: int = 30_000) -> DeltaChannel:
            # one channel per bound: the in-memory data lives in the channel object
            return shared.setdefault(
                (max_len, ttl_ms), InMemoryDeltaChannel(max_len=max_len, ttl_ms=ttl_ms)
            )

        yield Backend(make_memory)
        return
    url_fixture = "cluster_url" if request.param == "cluster" else "redis_url"
    client = redis_from_url(request.getfixturevalue(url_fixture))
    keys = RedisKeys("tether-dt")  # every test uses fresh session ids

    def make_redis(max_len: int = 10_000, ttl_ms: int = 30_000) -> DeltaChannel:
        return RedisDeltaChannel(client, keys, max_len=max_len, ttl_ms=ttl_ms)

    try:
        yield Backend(make_redis)
    finally:
        client.close()


def piece(
    i: int, *, run: str = "run-1", fence: int = 1, step: int = 0, text: str | None = None
) -> LiveDelta:
    return LiveDelta(run, fence, step, i, "text", f"w{i} " if text is None else text)


def step_pieces(n: int, **kw: object) -> list[LiveDelta]:
    return [piece(i, **kw) for i in range(n)]  # type: ignore[arg-type]


def unique(name: str) -> str:
    import uuid

    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_publish_then_read_in_order(backend: Backend) -> None:
    channel, s = backend.channel, unique("order")
    assert_conforms(channel, DeltaChannel)
    first = step_pieces(3)
    call = LiveDelta("run-1", 1, 0, 3, "tool_arguments", '{"a"', 0, "call_1", "lookup")
    channel.publish(T, s, first)
    channel.publish(T, s, [call])
    read = channel.read(T, s)
    assert [d for _c, d in read] == [*first, call]  # every tag comes back, call id and name too
    cursors = [c for c, _d in read]
    assert [d for _c, d in channel.read(T, s, after=cursors[1])] == [first[2], call]
    assert len(channel.read(T, s, limit=2)) == 2
    assert channel.read(T, "never-written") == []
    channel.publish(T, s, [])  # nothing to do, and no error
    assert channel.length(T, s) == 4


def test_current_step_starts_at_its_first_piece(backend: Backend) -> None:
    channel, s = backend.channel, unique("cur")
    assert channel.current_step(T, s) == ([], START)
    channel.publish(T, s, step_pieces(4, step=0))
    channel.publish(T, s, step_pieces(5, step=1)[:3])
    group, top = channel.current_step(T, s)
    assert group == step_pieces(5, step=1)[:3]
    assert top == channel.read(T, s)[-1][0]
    # the step goes on: a reader that took the group follows from its cursor and misses nothing
    channel.publish(T, s, step_pieces(5, step=1)[3:])
    assert [d for _c, d in channel.read(T, s, after=top)] == step_pieces(5, step=1)[3:]


def test_current_step_of_a_redo_is_only_the_new_attempt(backend: Backend) -> None:
    channel, s = backend.channel, unique("redo")
    channel.publish(T, s, step_pieces(6, fence=3, step=2))  # the attempt that died mid-step
    channel.publish(T, s, step_pieces(2, fence=4, step=2, text="again "))
    group, _top = channel.current_step(T, s)
    assert group == step_pieces(2, fence=4, step=2, text="again ")


def test_current_step_reads_across_pages(backend: Backend) -> None:
    channel, s = backend.channel, unique("long")
    pieces = step_pieces(1300)
    for start in range(0, len(pieces), 400):
        channel.publish(T, s, pieces[start : start + 400])
    assert channel.current_step(T, s)[0] == pieces


def test_follow_gets_each_piece_once_as_it_comes(backend: Backend) -> None:
    channel, s = backend.channel, unique("follow")
    channel.publish(T, s, step_pieces(2))
    _group, top = channel.current_step(T, s)
    got: list[LiveDelta] = []
    started = threading.Event()

    def follower() -> None:
        started.set()
        for _c, d in channel.follow(T, s, after=top, block_ms=200, idle_timeout_s=3):
            got.append(d)
            if d.index == 9:
                return

    thread = threading.Thread(target=follower)
    thread.start()
    started.wait(5)
    pieces = step_pieces(10)
    for p in pieces[2:]:
        channel.publish(T, s, [p])
    thread.join(10)
    assert got == pieces[2:]


def test_follow_stops_when_idle(backend: Backend) -> None:
    channel = backend.channel
    assert list(channel.follow(T, unique("idle"), block_ms=50, idle_timeout_s=0.2)) == []


def test_the_channel_is_bounded(backend: Backend) -> None:
    channel, s = backend.make(max_len=50), unique("bound")
    pieces = step_pieces(1000)
    for start in range(0, 1000, 100):
        channel.publish(T, s, pieces[start : start + 100])
    length = channel.length(T, s)
    assert 50 <= length <= 50 + NODE_SLACK
    assert [d for _c, d in channel.read(T, s)] == pieces[-length:]  # the newest are kept


def test_the_channel_expires_after_its_last_piece(backend: Backend) -> None:
    channel, s = backend.make(ttl_ms=300), unique("ttl")
    channel.publish(T, s, step_pieces(3))
    ttl = channel.ttl_ms(T, s)
    assert ttl is not None and 0 < ttl <= 300
    eventually(lambda: channel.ttl_ms(T, s) is None, timeout_s=10, interval_s=0.05)
    assert channel.read(T, s) == [] and channel.length(T, s) == 0
    assert channel.current_step(T, s) == ([], START)


def test_each_publish_refreshes_the_expiry(backend: Backend) -> None:
    channel, s = backend.make(ttl_ms=1000), unique("refresh")
    channel.publish(T, s, [piece(0)])
    eventually(lambda: (channel.ttl_ms(T, s) or 1000) < 700, timeout_s=10, interval_s=0.02)
    channel.publish(T, s, [piece(1)])
    ttl = channel.ttl_ms(T, s)
    assert ttl is not None and ttl > 700
    assert channel.length(T, s) == 2  # the first piece lives as long as the newest


def test_sessions_and_tenants_are_apart(backend: Backend) -> None:
    channel, s = backend.channel, unique("iso")
    channel.publish(T, s, [piece(0, text="mine")])
    channel.publish("other", s, [piece(0, text="theirs")])
    assert [d.text for _c, d in channel.read(T, s)] == ["mine"]
    assert [d.text for _c, d in channel.read("other", s)] == ["theirs"]


def test_bad_input_is_refused_before_any_io(backend: Backend) -> None:
    channel = backend.channel
    with pytest.raises(InvalidId):
        channel.publish(T, "bad id", [piece(0)])
    with pytest.raises(InvalidInput, match="negative"):
        channel.publish(T, S, [LiveDelta("run-1", 1, 0, -1, "text", "x")])
    with pytest.raises(InvalidInput, match="kind"):
        channel.publish(T, S, [LiveDelta("run-1", 1, 0, 0, "image", "x")])  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="TETHER_DELTA_MAX_LEN"):
        backend.make(max_len=0)
    assert channel.length(T, S) == 0
