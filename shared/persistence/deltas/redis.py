"""The delta channel on a Redis stream: ``<ns>:{<tenant>/<session>}:deltas`` (see
:mod:`tether.keys`), in the session's slot.

``publish`` is one ``EVALSHA`` of ``deltas_append.lua`` for a whole batch: every ``XADD`` trims
with ``MAXLEN ~`` (about ``max_len`` entries: Redis drops whole radix-tree nodes, so a channel
may hold up to a node, 100 entries by default, more) and the script refreshes the key's
``PEXPIRE``, so an idle channel disappears by itself. Nothing here is fenced: the pieces carry
their attempt's fence and readers ignore an older attempt's (:mod:`tether.persistence.deltas.live`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import redis

from tether.keys import RedisKeys
from tether.persistence.deltas._common import (
    current_step,
    end_of,
    from_fields,
    to_fields,
    validate_bounds,
    validate_deltas,
)
from tether.persistence.deltas.base import START, Cursor, LiveDelta
from tether.persistence.lua import load
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.persistence.streams._common import tail_wait_ms, validate_session
from tether.persistence.streams.redis import Rider

APPEND = load("deltas_append")
#: Entries fetched per page.
PAGE = 512

RawEntries = list[tuple[bytes, dict[bytes, bytes]]]


def parse_entries(raw: RawEntries | None) -> list[tuple[Cursor, LiveDelta]]:
    """``(cursor, piece)`` pairs from XRANGE/XREAD entries (runs' end marks left out: a
    reader that needs them, and every reader's cursor, looks at the raw entries)."""
    return [(e.decode(), from_fields(f)) for e, f in raw or [] if end_of(f) is None]


def ended_runs(raw: RawEntries | None) -> list[str]:
    """The run ids of the end marks among XREAD entries (see
    :data:`~tether.persistence.deltas._common.END_KIND`)."""
    return [run_id for _e, f in raw or [] if (run_id := end_of(f)) is not None]


def entries_of(resp: Any, key: str) -> RawEntries:
    """The entries of ``key`` in an XREAD reply (RESP2 list or RESP3 dict)."""
    if not resp:
        return []
    if isinstance(resp, dict):
        raw = resp.get(key.encode()) or resp.get(key) or []
        return cast(RawEntries, raw[0] if raw and isinstance(raw[0], list) else raw)
    return cast(RawEntries, next((e for k, e in resp if k in (key, key.encode())), []))


def append_args(max_len: int, ttl_ms: int, deltas: Sequence[LiveDelta]) -> list[Any]:
    """The script's ARGV for ``deltas`` (shared with the asyncio and pipelined callers)."""
    rest: list[Any] = []
    for delta in deltas:
        fields = to_fields(delta)
        rest.append(len(fields))
        rest.extend(fields)
    return APPEND.argv(rest, max_len=max_len, ttl_ms=ttl_ms)


class RedisDeltaChannel:
    """The :class:`~tether.persistence.deltas.base.DeltaChannel` on Redis.

    Args:
        client: a bytes client (:func:`tether.persistence.redis_conn.redis_from_url`).
        keys: the key schema (namespace).
        max_len: about this many entries are kept per session (``TETHER_DELTA_MAX_LEN``).
        ttl_ms: a channel expires this long after its last append (``TETHER_DELTA_TTL_S``).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys | None = None,
        *,
        max_len: int = 10_000,
        ttl_ms: int = 30_000,
    ) -> None:
        validate_bounds(max_len, ttl_ms)
        self._client = client
        self._keys = keys or RedisKeys()
        self._max_len = max_len
        self._ttl_ms = ttl_ms
        self._where = describe_client(client)
        self._append = client.register_script(APPEND.source)

    def __repr__(self) -> str:
        return f"RedisDeltaChannel({self._where}, {self._keys!r})"

    @property
    def keys(self) -> RedisKeys:
        """The key schema."""
        return self._keys

    @property
    def client(self) -> redis.Redis:
        """The Redis client (a follower reads the event stream beside the channel with it)."""
        return self._client

    @property
    def where(self) -> str:
        """The server, without secrets, for messages."""
        return self._where

    def publish(self, tenant: str, session_id: str, deltas: Sequence[LiveDelta]) -> None:
        """Append ``deltas`` with one script call.

        Raises:
            StreamUnavailable: Redis cannot be reached.
        """
        validate_session(tenant, session_id)
        validate_deltas(deltas)
        if not deltas:
            return
        key = self._keys.deltas(tenant, session_id)
        with translate_errors(self._where):
            self._append(
                keys=APPEND.keys(channel=key),
                args=append_args(self._max_len, self._ttl_ms, deltas),
            )

    def rider(
        self,
        tenant: str,
        session_id: str,
        deltas: Sequence[LiveDelta],
        done: Callable[[Any], None],
    ) -> Rider:
        """:meth:`publish` of ``deltas`` as a call that rides with the session's next event
        append (:meth:`~tether.persistence.streams.redis.RedisEventStream.append_marked`: the
        same round trip, the pieces first); ``done`` gets its reply or its error."""
        validate_session(tenant, session_id)
        validate_deltas(deltas)
        key = self._keys.deltas(tenant, session_id)
        args = append_args(self._max_len, self._ttl_ms, deltas)
        return Rider(self._append, APPEND.keys(channel=key), args, done)

    def read(
        self, tenant: str, session_id: str, *, after: Cursor = START, limit: int | None = None
    ) -> list[tuple[Cursor, LiveDelta]]:
        validate_session(tenant, session_id)
        key = self._keys.deltas(tenant, session_id)
        with translate_errors(self._where):
            raw = self._client.xrange(key, min="(" + after, max="+", count=limit)
        return parse_entries(cast(RawEntries, raw))

    def _newest_first(self, key: str) -> Iterator[tuple[Cursor, LiveDelta]]:
        end = "+"
        while True:
            with translate_errors(self._where):
                page = cast(RawEntries, self._client.xrevrange(key, max=end, min="-", count=PAGE))
            yield from parse_entries(page)
            if len(page) < PAGE:
                return
            end = "(" + page[-1][0].decode()

    def whole(self, tenant: str, session_id: str) -> tuple[list[LiveDelta], Cursor]:
        """Every piece the channel holds, oldest first, and its newest entry's cursor (an end
        mark's too): what a reader of whole runs catches up with."""
        validate_session(tenant, session_id)
        key = self._keys.deltas(tenant, session_id)
        pieces: list[LiveDelta] = []
        newest: Cursor = START
        while True:
            with translate_errors(self._where):
                page = cast(RawEntries, self._client.xrange(key, min="(" + newest, count=PAGE))
            pieces.extend(d for _c, d in parse_entries(page))
            if page:
                newest = page[-1][0].decode()
            if len(page) < PAGE:
                return pieces, newest

    def current_step(self, tenant: str, session_id: str) -> tuple[list[LiveDelta], Cursor]:
        validate_session(tenant, session_id)
        group, top = current_step(self._newest_first(self._keys.deltas(tenant, session_id)))
        return group, top or START

    def follow(
        self,
        tenant: str,
        session_id: str,
        *,
        after: Cursor = START,
        block_ms: int = 1000,
        idle_timeout_s: float | None = None,
    ) -> Iterator[tuple[Cursor, LiveDelta]]:
        validate_session(tenant, session_id)
        return self._follow(self._keys.deltas(tenant, session_id), after, block_ms, idle_timeout_s)

    def _follow(
        self, key: str, after: Cursor, block_ms: int, idle_timeout_s: float | None
    ) -> Iterator[tuple[Cursor, LiveDelta]]:
        idle_since = time.monotonic()
        while True:
            wait_ms = tail_wait_ms(block_ms, idle_timeout_s, idle_since)
            if wait_ms is None:
                return
            with translate_errors(self._where):
                resp = self._client.xread({key: after}, count=PAGE, block=wait_ms)
            raw = entries_of(resp, key)
            yield from parse_entries(raw)
            if raw:  # past an end mark too, or the next read returns it again
                after = raw[-1][0].decode()
                idle_since = time.monotonic()

    def length(self, tenant: str, session_id: str) -> int:
        validate_session(tenant, session_id)
        with translate_errors(self._where):
            return int(self._client.xlen(self._keys.deltas(tenant, session_id)))

    def ttl_ms(self, tenant: str, session_id: str) -> int | None:
        validate_session(tenant, session_id)
        with translate_errors(self._where):
            left = int(self._client.pttl(self._keys.deltas(tenant, session_id)))
        return None if left == -2 else max(left, 0)
