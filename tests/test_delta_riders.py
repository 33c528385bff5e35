"""A model call's last live pieces ride with the run's next event append (one round trip).

On Redis, :meth:`DeltaPublisher.hand_over` takes the pieces still queued for a session and the
next append (the one holding the step's ``MODEL_RESPONSE``) sends them first in its pipeline: on a
Redis that fsyncs every write, one write where there were two. The pieces still land before the
events, a rider's failure never fails the append, and another session's queued pieces are
published as before.
"""

from __future__ import annotations

from typing import Any

import redis

from tether.core.events import AgentEvent, EventType, TextPayload
from tether.keys import RedisKeys
from tether.persistence.deltas.base import LiveDelta
from tether.persistence.deltas.redis import RedisDeltaChannel
from tether.persistence.streams.redis import RedisEventStream, Rider
from tether.worker.engine.deltas import DeltaPublisher

TENANT = "t-riders"


def _piece(session_step: int, index: int, text: str) -> LiveDelta:
    return LiveDelta(run_id="r1", fence=1, step=session_step, index=index, kind="text", text=text)


def _event(seq: int) -> AgentEvent:
    return AgentEvent(
        seq=seq,
        type=EventType.MODEL_RESPONSE if seq == 2 else EventType.MODEL_REQUEST,
        tenant=TENANT,
        session_id="s1",
        run_id="r1",
        step=0,
        payload=TextPayload(text="x"),
    )


def _setup(client: redis.Redis, prefix: str) -> tuple[RedisKeys, RedisEventStream, DeltaPublisher]:
    keys = RedisKeys(prefix)
    client.set(keys.fence(TENANT, "s1"), 1)  # the lease's grant
    stream = RedisEventStream(client, keys=keys)
    return keys, stream, DeltaPublisher(RedisDeltaChannel(client, keys))


def test_the_pieces_ride_with_the_next_append_and_land_before_its_events(
    redis_client: redis.Redis,
) -> None:
    keys, stream, publisher = _setup(redis_client, "riders-a")
    stream.append(TENANT, "s1", [_event(1)], 1)
    riders: list[Rider] = []
    replies: list[Any] = []
    for n, text in enumerate(["hel", "lo"]):
        publisher._queue.append((TENANT, "s1", _piece(0, n, text)))  # queued, not yet out
    assert publisher.hand_over(TENANT, "s1", riders.append)
    assert len(riders) == 1 and redis_client.xlen(keys.deltas(TENANT, "s1")) == 0
    rider = riders[0]
    carried = Rider(
        rider.script, rider.keys, rider.args, lambda r: (replies.append(r), rider.done(r))
    )
    assert stream.append_marked(TENANT, "s1", [_event(2)], 1, None, [carried]) == 2
    assert replies == [1]  # one entry: the two pieces joined
    channel = publisher.channel
    assert isinstance(channel, RedisDeltaChannel)
    pieces = channel.read(TENANT, "s1")
    assert [p.text for _cursor, p in pieces] == ["hello"]
    response_id = redis_client.xrange(keys.session(TENANT, "s1").events)[-1][0].decode()
    ms, n = (int(x) for x in pieces[0][0].split("-"))
    assert (ms, n) <= tuple(int(x) for x in response_id.split("-"))  # not after the response


def test_a_failing_rider_never_fails_the_append(redis_client: redis.Redis) -> None:
    keys, stream, publisher = _setup(redis_client, "riders-b")
    redis_client.set(keys.deltas(TENANT, "s1"), "not a stream")
    publisher._queue.append((TENANT, "s1", _piece(0, 0, "x")))
    riders: list[Rider] = []
    assert publisher.hand_over(TENANT, "s1", riders.append)
    assert stream.append_marked(TENANT, "s1", [_event(1)], 1, None, riders) == 1
    assert redis_client.xlen(keys.session(TENANT, "s1").events) == 1


def test_another_sessions_pieces_are_published_as_before(redis_client: redis.Redis) -> None:
    keys, _stream, publisher = _setup(redis_client, "riders-c")
    publisher._queue.append((TENANT, "s1", _piece(0, 0, "mine")))
    publisher._queue.append((TENANT, "s2", _piece(0, 0, "theirs")))
    riders: list[Rider] = []
    assert publisher.hand_over(TENANT, "s1", riders.append)
    assert riders == []
    assert redis_client.xlen(keys.deltas(TENANT, "s1")) == 1
    assert redis_client.xlen(keys.deltas(TENANT, "s2")) == 1
