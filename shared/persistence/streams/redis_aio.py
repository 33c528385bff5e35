"""A session's live event stream on ``redis.asyncio``: the asyncio twin of
:class:`~tether.persistence.streams.redis.RedisEventStream` for producers, who only follow
streams (``tail``; workers append, on the blocking client). The catch-up and the cursor rules
are the pure functions of :mod:`tether.persistence.streams._common`, and what a tail yields is
decided by the same :class:`~tether.persistence.streams.redis.TailState`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import cast

import redis.asyncio

from tether.core.events import AgentEvent
from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, max_block_ms, translate_errors
from tether.persistence.streams._common import (
    tail_catch_up,
    validate_session,
    validate_tail_args,
)
from tether.persistence.streams.redis import (
    PAGE,
    CaughtUp,
    RedisEntry,
    TailState,
    check_block_ms,
    entries_of,
)


class _Fetched:
    """Entries fetched so far, newest first; remembers whether a reader wanted more."""

    def __init__(self, entries: list[RedisEntry]) -> None:
        self.entries = entries
        self.wanted_more = False

    def __iter__(self) -> Iterator[RedisEntry]:
        yield from self.entries
        self.wanted_more = True


class AsyncRedisEventStream:
    """Follows sessions' live event streams (asyncio).

    Args:
        client: a bytes asyncio client
            (:func:`~tether.persistence.redis_conn_aio.async_redis_from_url`).
        keys: the key schema (namespace); default prefix ``tether``.
    """

    def __init__(self, client: redis.asyncio.Redis, *, keys: RedisKeys | None = None) -> None:
        self._client = client
        self._keys = keys or RedisKeys()
        self._where = describe_client(client)
        self._max_block_ms = max_block_ms(client)

    def __repr__(self) -> str:
        return f"AsyncRedisEventStream({self._where}, {self._keys!r})"

    def check_block_ms(self, block_ms: int) -> None:
        """Refuse a blocking read that the client's socket timeout would cut.

        Raises:
            ConfigurationError: ``block_ms`` is not below the client's socket timeout.
        """
        check_block_ms(block_ms, self._max_block_ms, self._where)

    async def catch_up(self, tenant: str, session_id: str, after_seq: int) -> CaughtUp:
        """What a tail of the session yields before waiting (see :func:`tail_catch_up`), for a
        follower that reads this stream together with another one
        (:mod:`tether.persistence.deltas.live_redis_aio`)."""
        key = self._keys.events(tenant, session_id)
        entries: list[RedisEntry] = []
        end: bytes = b"+"
        while True:  # a page at a time, only as far back as the catch-up reads
            with translate_errors(self._where):
                page = cast(
                    "list[tuple[bytes, dict[bytes, bytes]]] | None",
                    await self._client.xrevrange(key, max=end, min="-", count=PAGE),
                )
            entries.extend(entries_of([(key, page or [])], key))
            fetched = _Fetched(entries)
            found = tail_catch_up(fetched, after_seq)
            if not fetched.wanted_more or not page or len(page) < PAGE:
                return found
            end = b"(" + page[-1][0]

    def tail(
        self,
        tenant: str,
        session_id: str,
        *,
        after_seq: int = 0,
        block_ms: int = 1000,
        idle_timeout_s: float | None = None,
    ) -> AsyncIterator[AgentEvent]:
        """Yield events after ``after_seq`` as they arrive; see :class:`TailCursor` for rewinds.

        ``async for``; otherwise as ``RedisEventStream.tail``.

        Raises:
            ConfigurationError: ``block_ms`` is not below the client's socket timeout.
            StreamUnavailable: Redis cannot be reached; tail again from the last seq received.
        """
        validate_session(tenant, session_id)
        validate_tail_args(after_seq, block_ms, idle_timeout_s)
        self.check_block_ms(block_ms)
        return self._tail(tenant, session_id, after_seq, block_ms, idle_timeout_s)

    async def _tail(
        self,
        tenant: str,
        session_id: str,
        after_seq: int,
        block_ms: int,
        idle_timeout_s: float | None,
    ) -> AsyncIterator[AgentEvent]:
        key = self._keys.events(tenant, session_id)
        caught_up = await self.catch_up(tenant, session_id, after_seq)
        state = TailState(key, caught_up, block_ms, idle_timeout_s)
        for event in state.first:
            yield event
        while (wait_ms := state.wait_ms()) is not None:
            with translate_errors(self._where):
                resp = await self._client.xread(state.positions(), count=PAGE, block=wait_ms)  # type: ignore[arg-type]
            for event in state.take(resp):
                yield event
