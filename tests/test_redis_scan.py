"""The secret scans' view of Redis finds a planted secret in every type of value the project
stores, where ``DUMP`` (LZF-compressed) does not, and refuses a type it cannot read."""

from __future__ import annotations

import pytest
import redis

from tests.support.redis_scan import flatten_redis
from tether.persistence.headcache.base import pack

SECRET = "sk-proj-" + "0123456789abcdef" * 3


def test_every_type_is_read_whole_and_cached_heads_decompressed(
    redis_client: redis.Redis,
) -> None:
    pad = "hello " * 8
    redis_client.set("string", pad + SECRET)
    redis_client.set("head", pack((pad + SECRET).encode(), "v1") or b"")
    redis_client.hset("hash", "field", pad + SECRET)
    redis_client.rpush("list", pad + SECRET)
    redis_client.sadd("set", pad + SECRET)
    redis_client.zadd("zset", {pad + SECRET: 1})
    redis_client.xadd("stream", {"data": pad + SECRET})
    needle = SECRET[8:].encode()
    found = flatten_redis(redis_client)
    assert sorted(found) == sorted(
        k.encode() for k in ("string", "head", "hash", "list", "set", "zset", "stream")
    )
    assert [k for k, v in found.items() if needle not in v] == []
    assert needle not in (redis_client.dump("string") or b"")  # why DUMP is not used


def test_a_type_the_scan_cannot_read_fails_it(redis_client: redis.Redis) -> None:
    redis_client.pfadd("hll", "x")  # a string to TYPE: read as one
    assert b"hll" in flatten_redis(redis_client)
    redis_client.execute_command("GEOADD", "geo", 0, 0, "m")  # a zset: read as one
    assert b"geo" in flatten_redis(redis_client, match="geo")
    with pytest.raises(AssertionError, match="skips"):
        flatten_redis(_Typed(redis_client, b"ReJSON-RL"))


class _Typed:
    """``client`` reporting every key as ``kind`` (a module's type this server lacks)."""

    def __init__(self, client: redis.Redis, kind: bytes) -> None:
        self._client, self._kind = client, kind

    def scan_iter(self, **kwargs: object) -> object:
        return self._client.scan_iter(**kwargs)  # type: ignore[arg-type]

    def type(self, key: bytes) -> bytes:
        return self._kind
