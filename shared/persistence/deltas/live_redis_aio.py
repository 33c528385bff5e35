"""Follow a session live on ``redis.asyncio``: the asyncio twin of
:class:`~tether.persistence.deltas.live_redis.RedisLiveFeed`, with the same catch-up, one
``XREAD`` per wait on both keys, and the same decisions
(:class:`~tether.persistence.deltas.live_redis.FollowState`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import redis.asyncio

from tether.keys import RedisKeys
from tether.persistence.deltas._common import current_step
from tether.persistence.deltas.base import START, Cursor, LiveDelta
from tether.persistence.deltas.live import LiveItem
from tether.persistence.deltas.live_redis import FollowState
from tether.persistence.deltas.redis import PAGE, RawEntries, parse_entries
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.persistence.streams._common import validate_session, validate_tail_args
from tether.persistence.streams.redis_aio import AsyncRedisEventStream


class AsyncRedisLiveFeed:
    """Follows sessions live on ``redis.asyncio`` (events and pieces).

    Args:
        client: a bytes asyncio client.
        keys: the key schema (namespace); default prefix ``tether``.
    """

    def __init__(self, client: redis.asyncio.Redis, *, keys: RedisKeys | None = None) -> None:
        self._client = client
        self._keys = keys or RedisKeys()
        self._where = describe_client(client)
        self._stream = AsyncRedisEventStream(client, keys=self._keys)

    async def _current_step(self, tenant: str, session_id: str) -> tuple[list[LiveDelta], Cursor]:
        """The pieces of the newest step so far and the newest cursor (see
        :meth:`DeltaChannel.current_step <tether.persistence.deltas.base.DeltaChannel>`)."""
        key = self._keys.deltas(tenant, session_id)
        fetched: list[tuple[Cursor, LiveDelta]] = []
        end = "+"
        while True:  # a page at a time, only as far back as the newest step reaches
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

    async def _whole(self, tenant: str, session_id: str) -> tuple[list[LiveDelta], Cursor]:
        """Every piece the channel holds and its newest cursor (as ``RedisDeltaChannel.whole``)."""
        key = self._keys.deltas(tenant, session_id)
        pieces: list[LiveDelta] = []
        newest: Cursor = START
        while True:
            with translate_errors(self._where):
                page = cast(
                    RawEntries, await self._client.xrange(key, min="(" + newest, count=PAGE)
                )
            pieces.extend(d for _c, d in parse_entries(page))
            if page:
                newest = page[-1][0].decode()
            if len(page) < PAGE:
                return pieces, newest

    def follow(
        self,
        tenant: str,
        session_id: str,
        *,
        after_seq: int = 0,
        block_ms: int = 1000,
        idle_timeout_s: float | None = None,
        stop: Callable[[], bool] | None = None,
        on_end: Callable[[str], None] | None = None,
        whole_steps: bool = False,
    ) -> AsyncIterator[LiveItem]:
        """Yield the session's events after ``after_seq`` and the live pieces, as they come;
        stop after ``idle_timeout_s`` without either (None: never), or once ``stop()`` answers
        True (asked after every batch and every empty wait of at most ``block_ms``).
        ``on_end(run_id)``: a run of the session was finished (its end mark was read).
        ``whole_steps``: the catch-up gives every piece the channel still holds of the steps
        it gives (see ``RedisLiveFeed.follow``).

        Raises:
            StreamUnavailable: Redis cannot be reached; follow again from the last seq.
            ConfigurationError: ``block_ms`` is not below the client's socket timeout.
        """
        validate_session(tenant, session_id)
        validate_tail_args(after_seq, block_ms, idle_timeout_s)
        self._stream.check_block_ms(block_ms)
        options: dict[str, Any] = dict(
            block_ms=block_ms, idle_timeout_s=idle_timeout_s, stop=stop, on_end=on_end
        )
        return self._follow(tenant, session_id, after_seq, whole_steps, options)

    async def _follow(
        self, tenant: str, session_id: str, after_seq: int, whole: bool, options: dict[str, Any]
    ) -> AsyncIterator[LiveItem]:
        if whole:  # the events first, as the sync follower
            caught_up = await self._stream.catch_up(tenant, session_id, after_seq)
            current = await self._whole(tenant, session_id)
        else:  # the current step first, as the sync follower
            current = await self._current_step(tenant, session_id)
            caught_up = await self._stream.catch_up(tenant, session_id, after_seq)
        state = FollowState(
            self._keys.events(tenant, session_id),
            self._keys.deltas(tenant, session_id),
            current,
            caught_up,
            whole=whole,
            **options,
        )
        for item in state.first:
            yield item
        while (wait_ms := state.wait_ms()) is not None:
            with translate_errors(self._where):
                resp = await self._client.xread(state.positions(), block=wait_ms)  # type: ignore[arg-type]
            for item in state.take(resp) or ():
                yield item
