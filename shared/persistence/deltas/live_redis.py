"""Follow a session live on Redis: its committed events and the pieces of the step under way,
in one order (:class:`~tether.persistence.deltas.live.LiveOrder`).

Both streams are in the session's slot, so each wait is one ``XREAD BLOCK`` on the two keys,
without ``COUNT``: one reply holds both streams up to one moment, which is what the order
needs. The catch-up reads the current step's pieces first, then the events (a step that
finishes in between is then seen whole in the events, its pieces dropped). What a follower
yields is decided by :class:`FollowState`, which the asyncio follower
(:mod:`tether.persistence.deltas.live_redis_aio`) shares.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from tether.core.events import AgentEvent
from tether.persistence.codec import loads_event
from tether.persistence.deltas.base import Cursor, LiveDelta
from tether.persistence.deltas.live import Fenced, LiveItem, LiveOrder
from tether.persistence.deltas.redis import (
    RedisDeltaChannel,
    ended_runs,
    entries_of,
    parse_entries,
)
from tether.persistence.redis_conn import translate_errors
from tether.persistence.streams._common import (
    Entry,
    TailCursor,
    tail_wait_ms,
    validate_session,
    validate_tail_args,
)
from tether.persistence.streams.redis import CaughtUp, RedisEntry, RedisEventStream


def decode(key: str, entry: RedisEntry) -> Fenced:
    """An event entry as ``(fence, event)``."""
    where = f"redis stream {key} entry {entry.entry_id!r}"
    event: AgentEvent = loads_event(entry.data, where=where)
    return entry.fence, event


class FollowState:
    """Where a follower is in both streams (sans-IO: the sync and asyncio followers do the
    reads, this decides what they yield).

    Args:
        events_key: the session's event stream.
        deltas_key: the session's delta channel.
        current: the current step's pieces (read first) and the channel's newest cursor.
        caught_up: the event stream's catch-up (read second).
        block_ms: the longest blocking read.
        idle_timeout_s: stop after this long without an event or a piece (None: never).
        stop: stop once it answers True (asked before every wait).
        on_end: called with the run id of every end mark read (``finish.lua`` appends one to
            the channel as it finishes a run), before ``stop`` is asked again.
        whole: ``current`` holds every piece the channel keeps and was read after the events
            (:meth:`LiveOrder.start_whole`), not the current step's read before them.
    """

    def __init__(
        self,
        events_key: str,
        deltas_key: str,
        current: tuple[list[LiveDelta], Cursor],
        caught_up: CaughtUp,
        *,
        block_ms: int,
        idle_timeout_s: float | None,
        stop: Callable[[], bool] | None,
        on_end: Callable[[str], None] | None = None,
        whole: bool = False,
    ) -> None:
        self._block_ms, self._idle_timeout_s, self._stop = block_ms, idle_timeout_s, stop
        self._on_end = on_end
        self._idle_since: float | None = None  # from the first wait, once the catch-up was had
        kept, top, start_seq = caught_up
        self._events_key, self._deltas_key = events_key, deltas_key
        self._cursor = TailCursor(start_seq, top)
        self._events_after: bytes = b"0-0" if top is None else top.entry_id
        self._deltas_after = current[1]
        self._order = LiveOrder()
        first = [decode(events_key, e) for e in kept if self._cursor.accept(e)]
        top_event = None if top is None else decode(events_key, top)
        start = self._order.start_whole if whole else self._order.start
        self.first = start(first, top_event, current[0])

    def wait_ms(self) -> int | None:
        """How long the next blocking read may wait; None: the follower ends (``stop`` said
        so, or nothing came for ``idle_timeout_s``)."""
        if self._stop is not None and self._stop():
            return None
        if self._idle_since is None:
            self._idle_since = time.monotonic()
        return tail_wait_ms(self._block_ms, self._idle_timeout_s, self._idle_since)

    def positions(self) -> dict[str, bytes | str]:
        """The ``XREAD`` arguments: both keys, from what was read so far."""
        return {self._events_key: self._events_after, self._deltas_key: self._deltas_after}

    def take(self, resp: Any) -> list[LiveItem] | None:
        """What to yield for one ``XREAD`` reply (None: it was empty)."""
        raw_events = entries_of(resp, self._events_key)
        raw_deltas = entries_of(resp, self._deltas_key)
        if not raw_events and not raw_deltas:
            return None
        pieces = parse_entries(raw_deltas)
        if raw_deltas:  # past an end mark too, or the next read returns it again
            self._deltas_after = raw_deltas[-1][0].decode()
        if self._on_end is not None:
            for run_id in ended_runs(raw_deltas):
                self._on_end(run_id)
        self._idle_since = time.monotonic()
        events: list[Fenced] = []
        for entry_id, fields in raw_events:
            seq, fence = int(fields[b"seq"]), int(fields[b"fence"])
            entry = Entry(entry_id, seq, fence, fields[b"event"])
            self._events_after = entry_id
            if self._cursor.accept(entry):
                events.append(decode(self._events_key, entry))
        return self._order.batch(events, (d for _c, d in pieces))


class RedisLiveFeed:
    """Follows sessions live on Redis (events and pieces).

    Args:
        stream: the sessions' event streams.
        channel: their delta channels (the same Redis).
    """

    def __init__(self, stream: RedisEventStream, channel: RedisDeltaChannel) -> None:
        self._stream = stream
        self._channel = channel
        self._client = channel.client
        self._where = channel.where

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
    ) -> Iterator[LiveItem]:
        """Yield the session's events after ``after_seq`` and the live pieces, as they come;
        stop after ``idle_timeout_s`` without either (None: never), or once ``stop()`` answers
        True (asked after every batch and every empty wait of at most ``block_ms``).
        ``on_end(run_id)``: a run of the session was finished (its end mark was read).
        ``whole_steps``: the catch-up gives every piece the channel still holds of the steps
        it gives (a reader of one run that may attach after the run ended), not only the
        pieces of the step under way.

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

    def _follow(
        self, tenant: str, session_id: str, after_seq: int, whole: bool, options: dict[str, Any]
    ) -> Iterator[LiveItem]:
        keys = self._channel.keys
        if whole:  # the events first: every step they close had all its pieces published
            caught_up = self._stream.catch_up(tenant, session_id, after_seq)
            current = self._channel.whole(tenant, session_id)
        else:  # the current step first: see the module's docstring
            current = self._channel.current_step(tenant, session_id)
            caught_up = self._stream.catch_up(tenant, session_id, after_seq)
        state = FollowState(
            keys.events(tenant, session_id),
            keys.deltas(tenant, session_id),
            current,
            caught_up,
            whole=whole,
            **options,
        )
        yield from state.first
        while (wait_ms := state.wait_ms()) is not None:
            with translate_errors(self._where):
                resp = self._client.xread(state.positions(), block=wait_ms)  # type: ignore[arg-type]
            yield from state.take(resp) or ()
