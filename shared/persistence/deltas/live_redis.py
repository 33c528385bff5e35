"""Follow a session live on Redis: its committed events and the pieces of the step under way,
in one order (:class:`~tether.persistence.deltas.live.LiveOrder`).

Both streams are in the session's slot, so each wait is one ``XREAD BLOCK`` on the two keys,
without ``COUNT``: one reply holds both streams up to one moment, which is what the order
needs. The catch-up reads the current step's pieces first, then the events (a step that
finishes in between is then seen whole in the events, its pieces dropped).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from tether.core.events import AgentEvent
from tether.persistence.codec import loads_event
from tether.persistence.deltas.live import Fenced, LiveItem, LiveOrder
from tether.persistence.deltas.redis import RedisDeltaChannel, entries_of, parse_entries
from tether.persistence.redis_conn import translate_errors
from tether.persistence.streams._common import (
    Entry,
    TailCursor,
    tail_catch_up,
    tail_wait_ms,
    validate_session,
    validate_tail_args,
)
from tether.persistence.streams.redis import RedisEventStream

RedisEntry = Entry[bytes, bytes]


def decode(key: str, entry: RedisEntry) -> Fenced:
    """An event entry as ``(fence, event)``."""
    where = f"redis stream {key} entry {entry.entry_id!r}"
    event: AgentEvent = loads_event(entry.data, where=where)
    return entry.fence, event


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
    ) -> Iterator[LiveItem]:
        """Yield the session's events after ``after_seq`` and the live pieces, as they come;
        stop after ``idle_timeout_s`` without either (None: never).

        Raises:
            StreamUnavailable: Redis cannot be reached; follow again from the last seq.
            ConfigurationError: ``block_ms`` is not below the client's socket timeout.
        """
        validate_session(tenant, session_id)
        validate_tail_args(after_seq, block_ms, idle_timeout_s)
        self._stream.check_block_ms(block_ms)
        return self._follow(tenant, session_id, after_seq, block_ms, idle_timeout_s)

    def _follow(
        self,
        tenant: str,
        session_id: str,
        after_seq: int,
        block_ms: int,
        idle_timeout_s: float | None,
    ) -> Iterator[LiveItem]:
        keys = self._channel.keys
        events_key, deltas_key = keys.events(tenant, session_id), keys.deltas(tenant, session_id)
        current, deltas_after = self._channel.current_step(tenant, session_id)
        newest_first = self._stream.newest_first(tenant, session_id)
        kept, top, start_seq = tail_catch_up(newest_first, after_seq)
        cursor = TailCursor(start_seq, top)
        events_after: bytes = b"0-0" if top is None else top.entry_id
        order = LiveOrder()
        first = [decode(events_key, e) for e in kept if cursor.accept(e)]
        top_event = None if top is None else decode(events_key, top)
        yield from order.start(first, top_event, current)
        idle_since = time.monotonic()
        while True:
            wait_ms = tail_wait_ms(block_ms, idle_timeout_s, idle_since)
            if wait_ms is None:
                return
            with translate_errors(self._where):
                resp = self._client.xread(
                    {events_key: events_after, deltas_key: deltas_after}, block=wait_ms
                )
            raw_events = entries_of(resp, events_key)
            pieces = parse_entries(entries_of(resp, deltas_key))
            if not raw_events and not pieces:
                continue
            idle_since = time.monotonic()
            events: list[Fenced] = []
            for entry_id, fields in raw_events:
                seq, fence = int(fields[b"seq"]), int(fields[b"fence"])
                entry = Entry(entry_id, seq, fence, fields[b"event"])
                events_after = entry_id
                if cursor.accept(entry):
                    events.append(decode(events_key, entry))
            if pieces:
                deltas_after = pieces[-1][0]
            yield from order.batch(events, (d for _c, d in pieces))
