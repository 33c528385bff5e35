"""A session's live event stream followed on ``redis.asyncio``: the asyncio twin of
:meth:`RedisEventStream.tail <tether.persistence.streams.redis.RedisEventStream.tail>`, with the
same catch-up and cursor rules (the pure functions of :mod:`tether.persistence.streams._common`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import cast

import redis.asyncio

from tether.core.events import AgentEvent
from tether.errors import ConfigurationError
from tether.keys import RedisKeys
from tether.persistence.codec import loads_event
from tether.persistence.redis_conn import (
    BLOCK_MARGIN_MS,
    DEFAULT_SOCKET_TIMEOUT_S,
    translate_errors,
)
from tether.persistence.streams._common import (
    Entry,
    TailCursor,
    tail_catch_up,
    tail_wait_ms,
    validate_session,
    validate_tail_args,
)
from tether.persistence.streams.redis import RedisEventStream

AsyncRedis = redis.asyncio.Redis
#: Stream entries fetched per page while catching up.
PAGE = 512


def check_block_ms(block_ms: int) -> None:
    """Refuse a blocking read that the asyncio client's socket timeout would cut.

    Raises:
        ConfigurationError: ``block_ms`` is not below the socket timeout.
    """
    limit_ms = int(DEFAULT_SOCKET_TIMEOUT_S * 1000) - BLOCK_MARGIN_MS
    if block_ms > limit_ms:
        raise ConfigurationError(
            f"block_ms={block_ms} is too close to the Redis socket timeout; use "
            f"block_ms <= {limit_ms}"
        )


class _Fetched:
    """Entries fetched so far, newest first; remembers whether a reader wanted more."""

    def __init__(self, entries: list[Entry[bytes, bytes]]) -> None:
        self.entries = entries
        self.wanted_more = False

    def __iter__(self) -> Iterator[Entry[bytes, bytes]]:
        yield from self.entries
        self.wanted_more = True


class AsyncEventTail:
    """Follows sessions' live event streams (asyncio).

    Args:
        client: a bytes asyncio client; its socket timeout must exceed ``block_ms``.
        keys: the key schema (namespace).
        where: a password-free description of the server, for messages.
    """

    def __init__(self, client: AsyncRedis, keys: RedisKeys, *, where: str) -> None:
        self._client = client
        self._keys = keys
        self._where = where

    async def catch_up(
        self, tenant: str, session_id: str, after_seq: int
    ) -> tuple[list[Entry[bytes, bytes]], Entry[bytes, bytes] | None, int]:
        """What a tail of the session yields before waiting (see :func:`tail_catch_up`), for a
        follower that reads this stream together with another one."""
        return await self._catch_up(self._keys.events(tenant, session_id), after_seq)

    async def _catch_up(
        self, key: str, after_seq: int
    ) -> tuple[list[Entry[bytes, bytes]], Entry[bytes, bytes] | None, int]:
        """:func:`tail_catch_up` over the stream, fetching pages only as far as it reads."""
        entries: list[Entry[bytes, bytes]] = []
        end: bytes = b"+"
        while True:
            with translate_errors(self._where):
                page = cast(
                    "list[tuple[bytes, dict[bytes, bytes]]] | None",
                    await self._client.xrevrange(key, max=end, min="-", count=PAGE),
                )
            entries.extend(RedisEventStream._entries_of([(key, page or [])], key))
            fetched = _Fetched(entries)
            found = tail_catch_up(fetched, after_seq)
            if not fetched.wanted_more or not page or len(page) < PAGE:
                return found
            end = b"(" + page[-1][0]

    async def tail(
        self,
        tenant: str,
        session_id: str,
        *,
        after_seq: int = 0,
        block_ms: int = 1000,
        idle_timeout_s: float | None = None,
    ) -> AsyncIterator[AgentEvent]:
        """Yield events after ``after_seq`` as they arrive (see ``RedisEventStream.tail``).

        Raises:
            StreamUnavailable: Redis cannot be reached; tail again from the last seq received.
        """
        validate_session(tenant, session_id)
        validate_tail_args(after_seq, block_ms, idle_timeout_s)
        check_block_ms(block_ms)
        key = self._keys.events(tenant, session_id)
        kept, top, start_seq = await self._catch_up(key, after_seq)
        cursor = TailCursor(start_seq, top)
        last_id: bytes = b"0-0" if top is None else top.entry_id
        for entry in kept:
            if cursor.accept(entry):
                yield self._decode(key, entry)
        idle_since = time.monotonic()
        while True:
            wait_ms = tail_wait_ms(block_ms, idle_timeout_s, idle_since)
            if wait_ms is None:
                return
            with translate_errors(self._where):
                resp = await self._client.xread({key: last_id}, count=PAGE, block=wait_ms)
            new = RedisEventStream._entries_of(resp, key)
            for entry in new:
                last_id = entry.entry_id
                if cursor.accept(entry):
                    yield self._decode(key, entry)
            if new:
                idle_since = time.monotonic()

    @staticmethod
    def _decode(key: str, entry: Entry[bytes, bytes]) -> AgentEvent:
        return loads_event(entry.data, where=f"redis stream {key} entry {entry.entry_id!r}")
