"""A stray value a tenant left on a shared key is repaired, on one Redis and on a Cluster.

The per-tenant ACL lets a tenant write the active-session index and the completion feed, so it
can turn either into a string; the command that meets it deletes the stray value and goes again
(:func:`tether.persistence.scripts.run_pipeline`). On a Cluster the pipeline keeps its commands
elsewhere (redis-py's cluster pipeline leaves ``command_stack`` empty), and the repair failed
there with an ``IndexError``. Any other error keeps its type.
"""

from __future__ import annotations

import pytest
import redis

from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.persistence.scripts import run_pipeline, send_shared

KEYS = RedisKeys("repair")


@pytest.fixture(params=["redis", "cluster"])
def client(request: pytest.FixtureRequest) -> redis.Redis:
    url = request.getfixturevalue("cluster_url" if request.param == "cluster" else "redis_url")
    return redis_from_url(url)


def test_a_stray_value_on_a_shared_key_is_deleted_and_the_command_goes_again(
    client: redis.Redis,
) -> None:
    shard = KEYS.active("acme", "s-1")
    member = KEYS.active_member("acme", "s-1")
    client.set(shard, "junk")  # a tenant's SET on the shared index
    replies = run_pipeline(client, [], lambda pipe: pipe.zadd(shard, {member: 1}))
    assert replies == [1] and client.type(shard) == b"zset"
    client.set(shard, "junk")
    assert send_shared(client, "ZADD", shard, 2, member) == 1
    assert client.zscore(shard, member) == 2.0


def test_any_other_error_keeps_its_type(client: redis.Redis) -> None:
    key = KEYS.run("acme", "s-1", "run-1")  # a tenant's own key: not repaired, never deleted
    client.set(key, "v")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        run_pipeline(client, [], lambda pipe: pipe.zadd(key, {"m": 1}))
    assert client.get(key) == b"v"
