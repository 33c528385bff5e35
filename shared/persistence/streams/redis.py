"""Event stream on Redis Streams: one stream per session, fenced appends in one Lua script.

Layout (see :mod:`tether.keys`): the stream ``<p>:{t/s}:events`` holds one entry per appended
event with fields ``seq``, ``fence`` and ``event`` (JSON from
:func:`tether.persistence.codec.dumps_event`);
the hash ``<p>:{t/s}:meta`` holds ``last_seq`` and ``last_fence``; the fence counter
``<p>:{t/s}:fence`` is the one :class:`~tether.runs.leases.redis.RedisLeaseManager` INCRs per grant.

``append`` is a single ``EVALSHA`` of :data:`APPEND_SCRIPT` (Redis 6.2 compatible; no functions),
so the fence check, the sequence rules, every ``XADD`` and the meta update are atomic, and a
whole batch costs one round trip. Reads walk the stream backwards (``XREVRANGE``) to build the
view described in :mod:`tether.persistence.streams._common`. ``tail`` catches up the same way and
then ``XREAD BLOCK``s from the newest entry ID it has seen, so a consumer that resumes with its
last seq gets no gaps and no duplicates; what it yields is decided by :class:`TailState`, which
the asyncio tail (:mod:`tether.persistence.streams.redis_aio`) shares.

Trims drop a prefix of the log: ``max_len`` with ``XTRIM MAXLEN``; ``min_seq`` with ``XTRIM
MINID`` at the entry ID of the first visible event whose ``seq >= min_seq`` (entries are appended
in seq order within a fence, and rewinds only add later entries, so everything before that ID
is either older events or superseded ones).

Time-based retention (``retention_s``): entry IDs are the server's clock in ms (``*``), so the
append script drops every entry older than ``now - retention_s`` with an exact ``XTRIM MINID``
before it adds the batch (now from ``TIME`` inside the script: workers' clocks never matter),
and sets the stream's TTL to the retention, so a session nobody appends to loses its whole live
copy too. Only the stream goes: the meta hash keeps ``last_seq`` and ``last_fence``, so fencing
and the sequence rules are unchanged. Like ``max_len``, this only shortens the *live* copy:
committed events stay in the head and the archive (readers get them from there, see
:class:`~tether.persistence.reader.SessionLogReader`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.commands.core import Script

from tether.core.events import AgentEvent
from tether.errors import ConfigurationError, PermissionDenied
from tether.ids import validate_id
from tether.keys import RedisKeys
from tether.persistence.codec import dumps_event, loads_event
from tether.persistence.lua import load
from tether.persistence.redis_conn import describe_client, max_block_ms, translate_errors
from tether.persistence.scripts import queue_script, run_pipeline
from tether.persistence.streams._common import (
    Entry,
    TailCursor,
    fence_not_granted,
    fenced_out,
    sequence_gap,
    tail_catch_up,
    tail_wait_ms,
    validate_batch,
    validate_fence,
    validate_max_len,
    validate_read_args,
    validate_retention,
    validate_session,
    validate_tail_args,
    validate_trim_args,
    view_suffix,
)

log = logging.getLogger(__name__)

RedisEntry = Entry[bytes, bytes]
#: What :func:`tether.persistence.streams._common.tail_catch_up` answers.
CaughtUp = tuple[list[RedisEntry], RedisEntry | None, int]
APPEND = load("stream_append")
MARK = load("stream_mark")
COMPACT = load("stream_compact")
#: The longest stream :meth:`RedisEventStream.compact` rewrites (entries).
COMPACT_MAX_ENTRIES = 200


@dataclass(frozen=True)
class StreamMark:
    """A run's step checkpoint written with a batch of events (see
    :meth:`RedisEventStream.append_marked`): ``body`` is the checkpoint's JSON, kept in the
    session's checkpoint hash under ``run_id`` for ``ttl_s``."""

    run_id: str
    body: str
    ttl_s: int


@dataclass(frozen=True)
class Rider:
    """A script call sent in the same round trip before a batch's append (see
    :meth:`RedisEventStream.append_marked`): the live pieces of a model call
    (:meth:`tether.persistence.deltas.redis.RedisDeltaChannel.rider`). Its reply, or the error
    it met, goes to ``done``; it never fails the append it rides with."""

    script: Script
    keys: list[Any]
    args: list[Any]
    done: Callable[[Any], None]


def _appended(
    tenant: str, session_id: str, events: Sequence[AgentEvent], fence: int, raw: Any
) -> int:
    """The last seq an append script answered, or its refusal raised."""
    reply = APPEND.reply(cast(list[Any], raw))
    status, value = int(reply["code"]), int(reply["value"])
    if status == 1:
        raise fenced_out(tenant, session_id, fence, value)
    if status == 3:
        raise fence_not_granted(tenant, session_id, fence, value)
    if status == 2:
        raise sequence_gap(tenant, session_id, events[0].seq, value)
    return value


#: Stream entries fetched per page while reading backwards, and per blocking read.
PAGE = 512


def _parse(entry_id: bytes, fields: dict[bytes, bytes]) -> RedisEntry:
    return Entry(entry_id, int(fields[b"seq"]), int(fields[b"fence"]), fields[b"event"])


def entries_of(resp: Any, key: str) -> list[RedisEntry]:
    """The entries of ``key`` in an XREAD or XREVRANGE-shaped reply (RESP2 list or RESP3 dict)."""
    if not resp:
        return []
    if isinstance(resp, dict):
        raw = resp.get(key.encode()) or resp.get(key) or []
        entries = raw[0] if raw and isinstance(raw[0], list) else raw
    else:
        entries = next((e for k, e in resp if k in (key, key.encode())), [])
    return [_parse(entry_id, fields) for entry_id, fields in entries]


def check_block_ms(block_ms: int, max_block_ms: int | None, where: str) -> None:
    """Refuse a blocking read that a client's socket timeout would cut (``max_block_ms``: see
    :func:`~tether.persistence.redis_conn.max_block_ms`; None: no limit).

    Raises:
        ConfigurationError: ``block_ms`` is not below the client's socket timeout.
    """
    if max_block_ms is not None and block_ms > max_block_ms:
        raise ConfigurationError(
            f"block_ms={block_ms} is too close to the Redis socket timeout of {where}; "
            f"use block_ms <= {max_block_ms} or raise socket_timeout"
        )


def decode(key: str, entry: RedisEntry) -> AgentEvent:
    """The event an entry of stream ``key`` carries."""
    return loads_event(entry.data, where=f"redis stream {key} entry {entry.entry_id!r}")


class TailState:
    """Where a tail of one session's stream is and what it yields (sans-IO: the sync and the
    asyncio tail do the reads, this decides).

    Args:
        key: the session's event stream.
        caught_up: the stream's catch-up (:func:`tail_catch_up`).
        block_ms: the longest blocking read.
        idle_timeout_s: stop once nothing arrived for this long (None: never).
    """

    def __init__(
        self, key: str, caught_up: CaughtUp, block_ms: int, idle_timeout_s: float | None
    ) -> None:
        kept, top, start_seq = caught_up
        self._key = key
        self._cursor = TailCursor(start_seq, top)
        self._after: bytes = b"0-0" if top is None else top.entry_id
        self._block_ms, self._idle_timeout_s = block_ms, idle_timeout_s
        self._idle_since: float | None = None  # from the first wait, once the catch-up was had
        self.first = [decode(key, e) for e in kept if self._cursor.accept(e)]

    def wait_ms(self) -> int | None:
        """How long the next blocking read may wait; None: the tail ends (idle too long)."""
        if self._idle_since is None:
            self._idle_since = time.monotonic()
        return tail_wait_ms(self._block_ms, self._idle_timeout_s, self._idle_since)

    def positions(self) -> dict[str, bytes]:
        """The ``XREAD`` argument: the stream, from what was read so far."""
        return {self._key: self._after}

    def take(self, resp: Any) -> list[AgentEvent]:
        """What to yield for one ``XREAD`` reply (the idle time counts again from the next
        wait when it held entries)."""
        new = entries_of(resp, self._key)
        out = []
        for entry in new:
            self._after = entry.entry_id
            if self._cursor.accept(entry):
                out.append(decode(self._key, entry))
        if new:
            self._idle_since = None
        return out


def _next_id(entry_id: bytes) -> bytes:
    """The smallest stream ID greater than ``entry_id``."""
    ms, _, seq = entry_id.partition(b"-")
    return ms + b"-" + str(int(seq or b"0") + 1).encode()


class RedisEventStream:
    """The :class:`~tether.persistence.streams.base.EventStream` on Redis.

    Args:
        client: a bytes client, e.g. from :func:`tether.persistence.redis_conn.redis_from_url`.
        keys: the key schema (namespace); default prefix ``tether``.
        max_len: approximate per-session retention applied on every append (``XADD MAXLEN ~``);
            None keeps everything until :meth:`trim`.
        retention_s: time-based retention applied on every append: entries older than this
            many seconds are dropped (exactly), and a stream without appends for this long
            expires (its meta stays); None keeps entries up to ``max_len`` only.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        keys: RedisKeys | None = None,
        max_len: int | None = None,
        retention_s: int | None = None,
    ) -> None:
        validate_max_len(max_len)
        validate_retention(retention_s)
        self._client = client
        self._keys = keys or RedisKeys()
        self._max_len = max_len
        self._retention_ms = 0 if retention_s is None else retention_s * 1000
        self._where = describe_client(client)
        self._append_script = client.register_script(APPEND.source)
        self._mark_script = client.register_script(MARK.source)
        self._compact_script = client.register_script(COMPACT.source)
        self._compact_refused = False  # the server refused DUMP/RESTORE once: not asked again
        self._max_block_ms = max_block_ms(client)

    def __repr__(self) -> str:
        return f"RedisEventStream({self._where}, {self._keys!r})"

    def append(self, tenant: str, session_id: str, events: Sequence[AgentEvent], fence: int) -> int:
        """Append ``events`` under ``fence`` in one script call; return the last seq afterwards.

        Raises:
            FencedOut: ``fence`` is older than the session's current fence; nothing written.
            ConflictError: the batch would leave a gap; nothing written.
            InvalidInput: the batch is malformed.
            StreamUnavailable: Redis cannot be reached.
        """
        validate_batch(tenant, session_id, events)
        validate_fence(fence)
        keys = self._keys.session(tenant, session_id)
        with translate_errors(self._where):
            raw = self._append_script(
                keys=APPEND.keys(stream=keys.events, meta=keys.meta, fence=keys.fence),
                args=self._batch_args(fence, events),
            )
        return _appended(tenant, session_id, events, fence, raw)

    def append_marked(
        self,
        tenant: str,
        session_id: str,
        events: Sequence[AgentEvent],
        fence: int,
        mark: StreamMark | None,
        riders: Sequence[Rider] = (),
    ) -> int:
        """:meth:`append`, and in the same script (one round trip, one write to the AOF) record
        ``mark`` in the session's step checkpoints, only once the whole batch is appended; an
        empty batch records it when ``fence`` is current (no ``mark``: :meth:`append`).
        ``riders`` go first in the same round trip (commands a client sends together reach
        the AOF together: one fsync under ``appendfsync always``). Raises as :meth:`append`
        does, having written neither."""
        validate_batch(tenant, session_id, events)
        validate_fence(fence)
        keys = self._keys.session(tenant, session_id)
        args = self._batch_args(fence, events)
        if mark is None:
            script = self._append_script
            names = APPEND.keys(stream=keys.events, meta=keys.meta, fence=keys.fence)
        else:
            validate_id(mark.run_id, kind="run id")
            script = self._mark_script
            names = MARK.keys(
                stream=keys.events,
                meta=keys.meta,
                fence=keys.fence,
                checkpoints=self._keys.checkpoints(tenant, session_id),
            )
            args = [*args[:3], mark.run_id, mark.body, mark.ttl_s, *args[3:]]
        with translate_errors(self._where):
            raw = self._with_riders(script, names, args, riders)
        return _appended(tenant, session_id, events, fence, raw)

    def _with_riders(
        self, script: Script, keys: list[Any], args: list[Any], riders: Sequence[Rider]
    ) -> Any:
        if not riders:
            return script(keys=keys, args=args)

        def fill(pipe: Any) -> None:
            for rider in riders:
                queue_script(pipe, rider.script, rider.keys, rider.args)
            queue_script(pipe, script, keys, args)

        scripts = [*(r.script for r in riders), script]
        replies = run_pipeline(self._client, scripts, fill, lenient=len(riders))
        for rider, reply in zip(riders, replies, strict=False):
            rider.done(reply)
        if isinstance(replies[-1], Exception):
            raise replies[-1]
        return replies[-1]

    def compact(self, tenant: str, session_id: str) -> bool:
        """Give back the room Redis keeps for appends in the session's stream (up to 4 KB per
        stream on Redis 7: more than a short session's events): for a session at rest, whose
        next append may be hours away. The entries, their IDs and the TTL stay as they were;
        a stream longer than :data:`COMPACT_MAX_ENTRIES` is left as is. Whether it was rewritten
        (never, once the server refused ``DUMP``/``RESTORE``: a warning says so once).

        Raises:
            StreamUnavailable: Redis cannot be reached.
        """
        validate_session(tenant, session_id)
        if self._compact_refused:
            return False
        key = self._keys.events(tenant, session_id)
        try:
            with translate_errors(self._where):
                length = self._compact_script(
                    keys=COMPACT.keys(stream=key),
                    args=COMPACT.argv(max_entries=COMPACT_MAX_ENTRIES),
                )
        except (PermissionDenied, redis.exceptions.ResponseError) as exc:
            # an ACL without @dangerous, or a managed Redis without DUMP/RESTORE: the streams
            # only keep their slack, which is no reason to ask again at every drain
            self._compact_refused = True
            log.warning(
                "Redis at %s refused to compact a stream at rest (%s); sessions at rest keep "
                "up to 4 KB of room for appends each (allow DUMP and RESTORE to the workers' "
                "ACL user to give it back)",
                self._where, exc,
            )  # fmt: skip
            return False
        return int(cast(int, length)) >= 0

    def _batch_args(self, fence: int, events: Sequence[AgentEvent]) -> list[str | int]:
        """``fence max_len retention_ms`` and the seq/json pairs of ``events``."""
        args: list[str | int] = [fence, self._max_len or 0, self._retention_ms]
        for ev in events:
            args.append(ev.seq)
            args.append(dumps_event(ev))
        return args

    def _newest_first(self, key: str) -> Iterator[RedisEntry]:
        """Entries of ``key`` from the newest, fetched page by page as the caller iterates."""
        end: bytes = b"+"
        while True:
            with translate_errors(self._where):
                page = cast(
                    "list[tuple[bytes, dict[bytes, bytes]]] | None",
                    self._client.xrevrange(key, max=end, min="-", count=PAGE),
                )
            for entry_id, fields in page or []:
                yield _parse(entry_id, fields)
            if not page or len(page) < PAGE:
                return
            end = b"(" + page[-1][0]

    def catch_up(self, tenant: str, session_id: str, after_seq: int) -> CaughtUp:
        """What a tail of the session yields before waiting (see :func:`tail_catch_up`), for a
        follower that reads this stream together with another one
        (:mod:`tether.persistence.deltas.live_redis`)."""
        return tail_catch_up(self._newest_first(self._keys.events(tenant, session_id)), after_seq)

    def check_block_ms(self, block_ms: int) -> None:
        """Refuse a blocking read that the client's socket timeout would cut.

        Raises:
            ConfigurationError: ``block_ms`` is not below the client's socket timeout.
        """
        check_block_ms(block_ms, self._max_block_ms, self._where)

    def read(
        self, tenant: str, session_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[AgentEvent]:
        """Visible events with ``seq > after_seq``, ascending, at most ``limit``.

        Walks back from the newest entry only until ``after_seq``; a full read scans the stream.
        """
        validate_session(tenant, session_id)
        validate_read_args(after_seq, limit)
        key = self._keys.events(tenant, session_id)
        kept, _top = view_suffix(self._newest_first(key), after_seq)
        if limit is not None:
            kept = kept[:limit]
        return [decode(key, e) for e in kept]

    def tail(
        self,
        tenant: str,
        session_id: str,
        *,
        after_seq: int = 0,
        block_ms: int = 1000,
        idle_timeout_s: float | None = None,
    ) -> Iterator[AgentEvent]:
        """Yield events after ``after_seq`` as they arrive; see :class:`TailCursor` for rewinds.

        Each wait is one ``XREAD BLOCK`` of at most ``block_ms`` (it must stay below the client's
        socket timeout). Stops once nothing arrived for ``idle_timeout_s`` (None: never). A
        connection failure raises :class:`StreamUnavailable`; call ``tail`` again with the last
        seq received to resume.

        Raises:
            ConfigurationError: ``block_ms`` is not below the client's socket timeout.
        """
        validate_session(tenant, session_id)
        validate_tail_args(after_seq, block_ms, idle_timeout_s)
        self.check_block_ms(block_ms)
        return self._tail(tenant, session_id, after_seq, block_ms, idle_timeout_s)

    def _tail(
        self,
        tenant: str,
        session_id: str,
        after_seq: int,
        block_ms: int,
        idle_timeout_s: float | None,
    ) -> Iterator[AgentEvent]:
        key = self._keys.events(tenant, session_id)
        caught_up = self.catch_up(tenant, session_id, after_seq)
        state = TailState(key, caught_up, block_ms, idle_timeout_s)
        yield from state.first
        while (wait_ms := state.wait_ms()) is not None:
            with translate_errors(self._where):
                resp = self._client.xread(state.positions(), count=PAGE, block=wait_ms)  # type: ignore[arg-type]
            yield from state.take(resp)

    def trim(
        self,
        tenant: str,
        session_id: str,
        *,
        max_len: int | None = None,
        min_seq: int | None = None,
    ) -> int:
        """Drop the oldest entries: keep at most ``max_len`` and those from the first visible
        event with ``seq >= min_seq`` on; return how many entries were dropped (exact)."""
        validate_session(tenant, session_id)
        validate_trim_args(max_len, min_seq)
        key = self._keys.events(tenant, session_id)
        dropped = 0
        if min_seq is not None:
            kept, top = view_suffix(self._newest_first(key), min_seq - 1)
            if top is not None:
                # Nothing visible at or above min_seq: drop everything up to the newest entry.
                min_id = kept[0].entry_id if kept else _next_id(top.entry_id)
                with translate_errors(self._where):
                    dropped += int(self._client.xtrim(key, minid=min_id, approximate=False))
        if max_len is not None:
            with translate_errors(self._where):
                dropped += int(self._client.xtrim(key, maxlen=max_len, approximate=False))
        return dropped
