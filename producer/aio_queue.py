"""The producer's side of the run queue and the event stream on ``redis.asyncio``.

:class:`AsyncRunQueue` is the asyncio twin of the producer-facing part of
:class:`~tether.runs.queue.redis.RedisRunQueue` (submit, records, cancel, the completion feed):
it runs the *same* Lua scripts on the same keys (:class:`~tether.keys.RedisKeys`), so a run
submitted by either is the same run to workers and to the other. ``tests/test_async_producer.py``
checks that the two agree. :class:`AsyncEventTail` follows a session's stream with the same
catch-up and cursor rules as :meth:`RedisEventStream.tail
<tether.persistence.streams.redis.RedisEventStream.tail>` (the pure functions of
:mod:`tether.persistence.streams._common`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, TypeVar, cast

import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from tether.core.events import AgentEvent, now_ms
from tether.errors import ConfigurationError
from tether.keys import RedisKeys
from tether.persistence.codec import loads_event
from tether.persistence.redis_conn import (
    BLOCK_MARGIN_MS,
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_HEALTH_CHECK_INTERVAL_S,
    DEFAULT_SOCKET_TIMEOUT_S,
    SCHEMES,
    redact_url,
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
from tether.runs.contract import RunRef, RunRequest, RunResult, WireRequest
from tether.runs.queue.base import (
    CancelOutcome,
    RunState,
    RunView,
    StopMode,
    SubmitOutcome,
)
from tether.runs.queue.redis import (
    CANCEL_SCRIPT,
    RECORD_REJECTED_SCRIPT,
    SUBMIT_SCRIPT,
    announce,
    done_entry,
    rejected_args,
    run_view,
    stray_index_keys,
    submit_call,
    submit_outcomes,
)

AsyncRedis = redis.asyncio.Redis
T = TypeVar("T")
#: Stream entries fetched per page while catching up.
PAGE = 512
#: Commands per pipeline: parsing a pipeline's replies holds the event loop, so a big batch is
#: sent as several pipelines.
CHUNK = 50
#: Connections of one producer's pool (each blocking read holds one while it waits).
MAX_CONNECTIONS = 64
#: How long a call waits for a free connection before failing.
POOL_TIMEOUT_S = 20.0


def async_redis_from_url(url: str) -> AsyncRedis:
    """An asyncio Redis client with the options of
    :func:`~tether.persistence.redis_conn.redis_from_url` (timeouts, keepalive, retries, bytes),
    on a pool of at most :data:`MAX_CONNECTIONS` connections.

    Raises:
        ConfigurationError: the scheme is not supported or the URL does not parse.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        raise ConfigurationError(
            f"Redis URL {redact_url(url)!r} has an unsupported scheme; use redis://host:port/db, "
            "rediss://host:port/db (TLS) or unix:///path/to/redis.sock"
        )
    options: dict[str, Any] = {
        "socket_timeout": DEFAULT_SOCKET_TIMEOUT_S,
        "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT_S,
        "health_check_interval": DEFAULT_HEALTH_CHECK_INTERVAL_S,
        "retry": Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=3),
        "decode_responses": False,
    }
    if scheme != "unix":  # keepalive is a TCP option; unix sockets refuse it
        options["socket_keepalive"] = True
    try:
        # a burst of concurrent calls waits for a free connection instead of failing
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            url, max_connections=MAX_CONNECTIONS, timeout=POOL_TIMEOUT_S, **options
        )
        return AsyncRedis.from_pool(pool)
    except ValueError as exc:
        raise ConfigurationError(f"Redis URL {redact_url(url)!r} is malformed: {exc}") from exc


def chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """``items`` in slices of at most :data:`CHUNK`: the loop regains control between them."""
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class AsyncRunQueue:
    """Submit runs, read their records, cancel them, follow completions (asyncio).

    Args:
        client: a bytes asyncio client (:func:`async_redis_from_url`).
        keys: the key schema (namespace).
        result_ttl_s: how long run records and request-id indexes live.
        where: a password-free description of the server, for messages.
    """

    def __init__(
        self, client: AsyncRedis, keys: RedisKeys, *, result_ttl_s: int, where: str
    ) -> None:
        self.client = client
        self.keys = keys
        self.result_ttl_s = result_ttl_s
        self._where = where
        self._submit = client.register_script(SUBMIT_SCRIPT)
        self._record_rejected = client.register_script(RECORD_REJECTED_SCRIPT)
        self._cancel = client.register_script(CANCEL_SCRIPT)

    async def submit_many(
        self, requests: Sequence[RunRequest | WireRequest], *, queue: str | None = None
    ) -> list[SubmitOutcome]:
        """Register and queue requests, idempotently, in one pipelined round trip (a
        :class:`WireRequest` registers its own text)."""
        k = self.keys
        stamp = now_ms()
        wires = [WireRequest.of(r) for r in requests]
        replies: list[Any] = []
        for chunk in chunks(wires):
            with translate_errors(self._where):
                pipe = self.client.pipeline(transaction=False)
                for w in chunk:  # as RedisRunQueue.submit_many: script, run index, active index
                    r = w.request
                    t, s = r.tenant, r.session_id
                    keys, args = submit_call(k, w, queue, self.result_ttl_s)
                    await self._submit(keys=keys, args=args, client=pipe)
                    pipe.set(k.run_index(t, r.run_id), s, nx=True, ex=self.result_ttl_s)
                    pipe.zadd(k.active(t, s), {k.active_member(t, s): stamp}, nx=True)
                replies.extend(await pipe.execute())
        outcomes = submit_outcomes(replies)
        stray = stray_index_keys(k, [w.request for w in wires], outcomes, replies)
        if stray:  # rare (a duplicate or busy submission): one more round trip
            with translate_errors(self._where):
                await self.client.delete(*stray)
        return outcomes

    async def record_rejected(self, result: RunResult, *, reply_to: str | None = None) -> bool:
        """Record a run that never entered a session queue (never rewrites a record)."""
        k = self.keys
        t, s = result.tenant, result.session_id
        args = rejected_args(result, self.result_ttl_s)
        with translate_errors(self._where):
            recorded = bool(
                await self._record_rejected(keys=[k.run(t, s, result.run_id)], args=args)
            )
            if recorded:
                pipe = self.client.pipeline(transaction=False)
                pipe.set(k.run_index(t, result.run_id), s, nx=True, ex=self.result_ttl_s)
                announce(pipe, k, result, reply_to, self.result_ttl_s)
                await pipe.execute()
        return recorded

    async def locate(self, tenant: str, run_id: str) -> RunRef | None:
        """Where ``tenant``'s run lives, from the tenant's run-id index."""
        with translate_errors(self._where):
            raw = await self.client.get(self.keys.run_index(tenant, run_id))
        return RunRef(tenant, _text(raw), run_id) if raw is not None else None

    async def get(self, ref: RunRef) -> RunView | None:
        """The run record, or None when unknown or expired."""
        with translate_errors(self._where):
            raw = await self.client.hgetall(self.keys.run(*ref))
        return run_view(ref.run_id, cast(dict[bytes, bytes], raw))

    async def peek_many(self, refs: Sequence[RunRef]) -> dict[str, RunResult | None]:
        """For each run with a record: its result (None while unfinished), in one round trip."""
        out: dict[str, RunResult | None] = {}
        for chunk in chunks(refs):
            with translate_errors(self._where):
                pipe = self.client.pipeline(transaction=False)
                for ref in chunk:
                    pipe.hmget(self.keys.run(*ref), ["status", "result"])
                replies = cast(list[list[bytes | None]], await pipe.execute())
            for ref, (status, result) in zip(chunk, replies, strict=True):
                if status is None and result is None:
                    continue
                out[ref.run_id] = None if result is None else RunResult.model_validate_json(result)
        return out

    async def request_cancel(self, ref: RunRef) -> CancelOutcome:
        """Ask the run to stop (see :class:`~tether.runs.queue.base.CancelOutcome`)."""
        k = self.keys
        with translate_errors(self._where):
            outcome = await self._cancel(
                keys=[k.run(*ref), k.cancel(*ref)], args=[self.result_ttl_s]
            )
        return CancelOutcome(_text(outcome))

    async def preempt(
        self, tenant: str, session_id: str, run_id: str, mode: StopMode
    ) -> str | None:
        """Ask the session's running run (not ``run_id``) to stop in ``mode``."""
        k = self.keys
        with translate_errors(self._where):
            raw = await self.client.lindex(k.pending(tenant, session_id), 0)
            head = _text(raw) if raw is not None else None
            if head is None or head == run_id:
                return None
            status = await self.client.hget(k.run(tenant, session_id, head), "status")
            if status != RunState.RUNNING.value.encode():
                return None
            # NX: an interrupt never softens a cancel already asked for
            await self.client.set(
                k.cancel(tenant, session_id, head), mode.value, nx=True, ex=self.result_ttl_s
            )
        return head

    async def done_last_id(self, feed: str | None = None) -> bytes:
        """The id of the newest completion entry of ``feed`` (``0-0`` when none)."""
        with translate_errors(self._where):
            entries = await self.client.xrevrange(self.keys.feed_stream(feed), count=1)
        return cast(bytes, entries[0][0]) if entries else b"0-0"

    async def close_feed(self, feed: str) -> None:
        """Drop a producer's feed (the producer is closing)."""
        with translate_errors(self._where):
            await self.client.delete(self.keys.producer_done(feed))

    async def read_done(
        self, after_id: bytes, block_ms: int, feed: str | None = None
    ) -> list[tuple[bytes, RunRef]]:
        """Completion entries of ``feed`` after ``after_id`` (blocks up to ``block_ms``)."""
        with translate_errors(self._where):
            reply = await self.client.xread(
                {self.keys.feed_stream(feed): after_id}, block=block_ms, count=1000
            )
        return [done_entry(i, f) for _key, entries in cast(Any, reply) or [] for i, f in entries]


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
        limit_ms = int(DEFAULT_SOCKET_TIMEOUT_S * 1000) - BLOCK_MARGIN_MS
        if block_ms > limit_ms:
            raise ConfigurationError(
                f"block_ms={block_ms} is too close to the Redis socket timeout; use "
                f"block_ms <= {limit_ms}"
            )
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
