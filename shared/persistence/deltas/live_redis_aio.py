"""The asyncio twin of :class:`~tether.persistence.deltas.live_redis.RedisLiveFeed`: the same
catch-up and one ``XREAD`` per wait on both keys, with the same order
(:class:`~tether.persistence.deltas.live.LiveOrder`)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import cast

import redis.asyncio

from tether.keys import RedisKeys
from tether.persistence.deltas._common import current_step
from tether.persistence.deltas.base import START, Cursor, LiveDelta
from tether.persistence.deltas.live import LiveItem
from tether.persistence.deltas.live_redis import FollowState
from tether.persistence.deltas.redis import PAGE, RawEntries, parse_entries
from tether.persistence.redis_conn import translate_errors
from tether.persistence.streams._common import tail_wait_ms, validate_session, validate_tail_args
from tether.persistence.streams.redis_aio import AsyncEventTail, check_block_ms


class AsyncLiveFeed:
    """Follows sessions live on ``redis.asyncio`` (events and pieces).

    Args:
        client: a bytes asyncio client.
        keys: the key schema (namespace).
        where: a password-free description of the server, for messages.
    """

    def __init__(self, client: redis.asyncio.Redis, keys: RedisKeys, *, where: str) -> None:
        self._client = client
        self._keys = keys
        self._where = where
        self._events = AsyncEventTail(client, keys, where=where)

    async def current_step(self, tenant: str, session_id: str) -> tuple[list[LiveDelta], Cursor]:
        """The pieces of the newest step so far and the newest cursor (see
        :meth:`DeltaChannel.current_step <tether.persistence.deltas.base.DeltaChannel>`)."""
        key = self._keys.deltas(tenant, session_id)
        fetched: list[tuple[Cursor, LiveDelta]] = []
        end = "+"
        while True:
            with translate_errors(self._where):
                page = cast(
                    RawEntries, await self._client.xrevrange(key, max=end, min="-", count=PAGE)
                )
            fetched.extend(parse_entries(page))
            group, top = current_step(fetched)
            whole = (group and group[0].index == 0) or len(group) < len(fetched)
            if whole or len(page) < PAGE:
                return group, top or START
            end = "(" + page[-1][0].decode()

    async def follow(
        self,
        tenant: str,
        session_id: str,
        *,
        after_seq: int = 0,
        block_ms: int = 1000,
        idle_timeout_s: float | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> AsyncIterator[LiveItem]:
        """Yield the session's events after ``after_seq`` and the live pieces (see
        ``RedisLiveFeed.follow``)."""
        validate_session(tenant, session_id)
        validate_tail_args(after_seq, block_ms, idle_timeout_s)
        check_block_ms(block_ms)
        current = await self.current_step(tenant, session_id)  # first, as the sync follower
        caught_up = await self._events.catch_up(tenant, session_id, after_seq)
        state = FollowState(
            self._keys.events(tenant, session_id),
            self._keys.deltas(tenant, session_id),
            current,
            caught_up,
        )
        for item in state.first:
            yield item
        idle_since = time.monotonic()
        while True:
            if stop is not None and stop():
                return
            wait_ms = tail_wait_ms(block_ms, idle_timeout_s, idle_since)
            if wait_ms is None:
                return
            with translate_errors(self._where):
                resp = await self._client.xread(state.positions(), block=wait_ms)  # type: ignore[arg-type]
            items = state.take(resp)
            if items is not None:
                idle_since = time.monotonic()
                for item in items:
                    yield item
