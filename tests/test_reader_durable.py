"""The reader over durable storage: S3 heads + S3 archive + a Redis stream."""

from __future__ import annotations

import redis

from tests.support.moto_server import S3TestBucket
from tether import Agent, ModelResponse, ScriptedModel, SessionLogReader, tool
from tether.core.events import EventType
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.persistence.storage_url import open_storage
from tether.persistence.streams.redis import RedisEventStream


@tool
def echo() -> str:
    """Echo."""
    return "echo-output"


def test_history_survives_a_redis_flush(s3_bucket: S3TestBucket, redis_url: str) -> None:
    store, archive = open_storage(
        f"s3://{s3_bucket.bucket}/tether",
        endpoint_url=s3_bucket.endpoint_url,
        region_name=s3_bucket.region,
        aws_access_key_id=s3_bucket.access_key_id,
        aws_secret_access_key=s3_bucket.secret_access_key,
    )
    client: redis.Redis = redis_from_url(redis_url)
    stream = RedisEventStream(client, keys=RedisKeys("durable-test"))
    model = ScriptedModel(
        [
            ModelResponse.call("call_1", "echo"),
            ModelResponse.final("one"),
            ModelResponse.final("two"),
        ]
    )
    agent = Agent(model, tools=[echo], store=store, archive=archive)
    session = agent.new_session("dur-1", tenant="acme")
    session.add_listener(lambda e: stream.append("acme", "dur-1", [e], fence=1))
    session.run("first")
    session.save()
    session.run("second")
    session.save()
    committed = session.events
    reader = SessionLogReader(store, archive, stream)
    assert reader.events("dur-1", tenant="acme") == committed
    assert reader.events("dur-1", tenant="acme", include_live=True) == committed
    client.flushall()
    assert stream.read("acme", "dur-1") == []
    assert reader.events("dur-1", tenant="acme") == committed
    assert reader.verify("dur-1", tenant="acme").ok
    fork = reader.fork("dur-1", "dur-2", tenant="acme")
    forked = reader.events("dur-2", tenant="acme")
    assert [e.seq for e in forked[:-1]] == [e.seq for e in committed]  # the whole history
    assert forked[-1].type is EventType.SESSION_FORKED  # then where it came from
    assert forked[-1].seq == committed[-1].seq + 1
    assert reader.project("dur-2", tenant="acme") == fork.memory
    resumed = agent.resume_session("dur-1", "acme")
    assert resumed.memory_snapshot() == session.memory_snapshot()
    assert reader.list_session_ids("acme") == ["dur-1", "dur-2"]
    assert reader.list_session_ids("default") == []
