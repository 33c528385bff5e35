"""Every value a Redis holds, as plain bytes, for tests that scan it for planted secrets.

``DUMP`` is no substitute: its payload is LZF-compressed (Redis' default ``rdbcompression``),
which splits any text longer than a few bytes, so a secret stored there is not found in it. Each
value is read with the command of its type, and a cached head (zlib inside a ``thc2`` entry) is
given decompressed.
"""

from __future__ import annotations

from typing import Any

from tether.persistence.headcache.base import unpack


def flatten_redis(client: Any, match: str | None = None) -> dict[bytes, bytes]:
    """Every key of ``client`` (matching ``match``) with its whole value as bytes."""
    out: dict[bytes, bytes] = {}
    for key in client.scan_iter(match=match, count=1000):
        kind = client.type(key)
        parts: list[bytes] = []
        if kind == b"string":
            value = client.get(key) or b""
            cached = unpack(value)
            parts += [value] if cached is None else [value, cached.data]
        elif kind == b"hash":
            for field, value in client.hgetall(key).items():
                parts += [field, value]
        elif kind == b"list":
            parts += client.lrange(key, 0, -1)
        elif kind == b"set":
            parts += list(client.smembers(key))
        elif kind == b"zset":
            parts += [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
        elif kind == b"stream":
            for _id, fields in client.xrange(key):
                for field, value in fields.items():
                    parts += [field, value]
        elif kind != b"none":  # a type this scan does not read would hide what it holds
            raise AssertionError(f"redis key {key!r} is a {kind!r}, which flatten_redis skips")
        out[key] = b"\x00".join(parts)
    return out
