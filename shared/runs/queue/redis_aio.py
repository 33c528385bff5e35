"""The producer-facing part of the run queue on ``redis.asyncio``: submit, records, cancel and
the completion feed.

:class:`AsyncRedisRunQueue` is the asyncio twin of
:class:`~tether.runs.queue.redis.RedisRunQueue`'s producer roles (``Submissions``,
``Cancellation``, ``Completions``): it runs the *same* scripts through the *same* KEYS/ARGV
builders (:mod:`~tether.runs.queue.redis._common`) on the same keys and reads the feed's replies
with the same functions (:mod:`~tether.runs.queue.redis.completions`), so a run submitted by
either is the same run to workers and to the other. ``tests/test_async_producer.py`` checks that
the two agree, ``tests/test_twin_surfaces.py`` that their surfaces do.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar, cast

import redis.asyncio
from redis.exceptions import NoPermissionError

from tether.core.events import now_ms
from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.persistence.scripts import pipeline_commands, stray_shared_key
from tether.runs.contract import RunRef, RunRequest, RunResult, WireRequest
from tether.runs.queue.base import (
    CancelOutcome,
    Completion,
    RunState,
    RunView,
    StopMode,
    SubmitOutcome,
)
from tether.runs.queue.record import RunField
from tether.runs.queue.redis._common import (
    CANCEL,
    RECORD_REJECTED,
    SUBMIT,
    announce,
    cancel_call,
    rejected_argv,
    run_view,
    stray_index_keys,
    submit_argv,
    submit_keys,
    submit_outcomes,
    text,
)
from tether.runs.queue.redis.completions import (
    COMPLETIONS_PAGE,
    MERGED_PAUSE_MS,
    by_shard,
    completions_of,
    merge,
    merged_position,
    newest_position,
    shard_ids,
)

T = TypeVar("T")
#: Commands per pipeline: parsing a pipeline's replies holds the event loop, so a big batch is
#: sent as several pipelines.
CHUNK = 50


def _chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """``items`` in slices of at most :data:`CHUNK`: the loop regains control between them."""
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]


class AsyncRedisRunQueue:
    """The producer's roles of :class:`~tether.runs.queue.redis.RedisRunQueue` on
    ``redis.asyncio``: submit runs, read their records, cancel them, follow completions.

    Args:
        client: a bytes asyncio client
            (:func:`~tether.persistence.redis_conn_aio.async_redis_from_url`).
        keys: the key schema (namespace).
        result_ttl_s: how long run records and request-id indexes live.
    """

    def __init__(self, client: redis.asyncio.Redis, keys: RedisKeys, *, result_ttl_s: int) -> None:
        self.client = client
        self.keys = keys
        self.result_ttl_s = result_ttl_s
        self._where = describe_client(client)
        self._submit = client.register_script(SUBMIT.source)
        self._record_rejected = client.register_script(RECORD_REJECTED.source)
        self._cancel = client.register_script(CANCEL.source)
        self._noted_tenants: set[str] = set()
        self._cluster = isinstance(cast(Any, client), redis.asyncio.RedisCluster)

    async def submit_many(
        self, requests: Sequence[RunRequest | WireRequest], *, queue: str | None = None
    ) -> list[SubmitOutcome]:
        """Register and queue requests, idempotently, in one pipelined round trip.

        As ``RedisRunQueue.submit_many`` (a :class:`WireRequest` registers its own text); a big
        batch is sent as several pipelines, so the loop regains control between them.
        """
        k = self.keys
        stamp = now_ms()
        wires = [WireRequest.of(r) for r in requests]
        replies: list[Any] = []
        for chunk in _chunks(wires):
            with translate_errors(self._where):
                pipe = self.client.pipeline(transaction=False)
                for w in chunk:  # as RedisRunQueue.submit_many: script, run index, queued index
                    r = w.request
                    t, s = r.tenant, r.session_id
                    argv = submit_argv(w, queue, self.result_ttl_s)
                    await self._submit(keys=submit_keys(k, r), args=argv, client=pipe)
                    pipe.set(k.run_index(t, r.run_id), s, nx=True, ex=self.result_ttl_s)
                    pipe.zadd(k.tenant_queued(t, s), {s: stamp}, nx=True)
                replies.extend(await self._execute(pipe))
        outcomes = submit_outcomes(replies)
        stray = stray_index_keys(k, [w.request for w in wires], outcomes, replies)
        if stray:  # rare (a duplicate or busy submission): one more round trip
            with translate_errors(self._where):
                await self.client.delete(*stray)
        for tenant in {w.request.tenant for w in wires} - self._noted_tenants:
            # as RedisRunQueue.submit_many: once per tenant, if this credential may
            with translate_errors(self._where), contextlib.suppress(NoPermissionError):
                await self.client.zadd(k.tenants(), {tenant: now_ms()}, nx=True)
            self._noted_tenants.add(tenant)
        return outcomes

    async def _execute(self, pipe: Any) -> list[Any]:
        """``pipe``'s replies; as :func:`~tether.persistence.scripts.run_pipeline`, a command
        on a shared key that meets a tenant's stray value there deletes it and goes again."""
        commands = pipeline_commands(pipe)
        replies = list(await pipe.execute(raise_on_error=False))
        for n, reply in enumerate(replies):
            if isinstance(reply, Exception):
                if len(commands) != len(replies):
                    raise reply  # which command failed is unknown: nothing to repair
                await self.client.delete(stray_shared_key(commands[n], reply))
                send: Any = self.client.execute_command  # untyped in redis-py
                replies[n] = await send(*commands[n])
        return replies

    async def restricted(self) -> bool:
        """True when this queue's credential may not read the namespace's own keys: a tenant's
        ACL user (docs/trust-model.md), as a producer of a deployment with per-tenant users."""
        try:
            await self.client.exists(self.keys.tenants())
        except NoPermissionError:
            return True
        return False

    async def record_rejected(self, result: RunResult, *, reply_to: str | None = None) -> bool:
        """Record a run that never entered a session queue (invalid, unknown agent, busy).

        A run id that already has a record is never rewritten: then False is returned.
        """
        k = self.keys
        t, s = result.tenant, result.session_id
        keys = RECORD_REJECTED.keys(run=k.run(t, s, result.run_id))
        argv = rejected_argv(result, self.result_ttl_s)
        with translate_errors(self._where):
            recorded = bool(await self._record_rejected(keys=keys, args=argv))
            if recorded:
                pipe = self.client.pipeline(transaction=False)
                pipe.set(k.run_index(t, result.run_id), s, nx=True, ex=self.result_ttl_s)
                announce(pipe, k, result, reply_to, self.result_ttl_s, observers=False)
                await self._execute(pipe)
        return recorded

    async def locate(self, tenant: str, run_id: str) -> RunRef | None:
        """Where ``tenant``'s run lives, from the tenant's run-id index."""
        with translate_errors(self._where):
            raw = await self.client.get(self.keys.run_index(tenant, run_id))
        return RunRef(tenant, text(raw), run_id) if raw is not None else None

    async def get(self, ref: RunRef) -> RunView | None:
        """The run record, or None when unknown or expired."""
        with translate_errors(self._where):
            raw = await self.client.hgetall(self.keys.run(*ref))
        return run_view(ref.run_id, cast(dict[bytes, bytes], raw))

    async def peek_many(self, refs: Sequence[RunRef]) -> dict[str, RunResult | None]:
        """For each run with a record: its result (None while unfinished), in one round trip."""
        out: dict[str, RunResult | None] = {}
        for chunk in _chunks(refs):
            with translate_errors(self._where):
                pipe = self.client.pipeline(transaction=False)
                for ref in chunk:
                    pipe.hmget(self.keys.run(*ref), [RunField.STATUS, RunField.RESULT])
                replies = cast(list[list[bytes | None]], await pipe.execute())
            for ref, (status, result) in zip(chunk, replies, strict=True):
                if status is None and result is None:
                    continue
                out[ref.run_id] = None if result is None else RunResult.model_validate_json(result)
        return out

    async def request_cancel(self, ref: RunRef) -> CancelOutcome:
        """Ask the run to stop (see :class:`~tether.runs.queue.base.CancelOutcome`)."""
        keys, argv = cancel_call(self.keys, ref, self.result_ttl_s)
        with translate_errors(self._where):
            outcome = await self._cancel(keys=keys, args=argv)
        return CancelOutcome(text(outcome))

    async def preempt(
        self, tenant: str, session_id: str, run_id: str, mode: StopMode
    ) -> str | None:
        """Ask the session's running run (not ``run_id``) to stop in ``mode``."""
        k = self.keys
        with translate_errors(self._where):
            raw = await self.client.lindex(k.pending(tenant, session_id), 0)
            head = text(raw) if raw is not None else None
            if head is None or head == run_id:
                return None
            status = await self.client.hget(k.run(tenant, session_id, head), RunField.STATUS)
            if status != RunState.RUNNING.value.encode():
                return None
            # NX: an interrupt never softens a cancel already asked for
            await self.client.set(
                k.cancel(tenant, session_id, head), mode.value, nx=True, ex=self.result_ttl_s
            )
        return head

    def feed_shards(self, feed: str | None = None) -> int:
        """How many shards ``feed`` has (each with its own positions)."""
        return self.keys.feed_shards(feed)

    def feed_readers(self, feed: str | None = None) -> list[int | None]:
        """The shards each blocking reader of ``feed`` reads: one reader of the whole feed
        (``[None]``) on a single Redis, one per shard on a cluster."""
        return list(range(self.feed_shards(feed))) if self._cluster else [None]

    async def done_last_id(self, feed: str | None = None, shard: int | None = None) -> bytes:
        """The position of the newest completion of ``feed``'s ``shard`` (``0-0`` when none),
        or of the whole feed (None: a merged position)."""
        shards = [shard] if shard is not None else range(self.feed_shards(feed))
        with translate_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            for n in shards:
                pipe.xrevrange(self.keys.feed_stream(feed, n), count=1)
            ids = [newest_position(newest) for newest in await pipe.execute()]
        return merged_position(ids)

    async def read_done(
        self, after_id: bytes, block_ms: int, feed: str | None = None, shard: int | None = None
    ) -> list[tuple[bytes, RunRef]]:
        """Completion entries of ``feed`` after ``after_id`` (blocks up to ``block_ms``)."""
        found = await self.read_completions(after_id, block_ms, feed, shard)
        return [(c.position, c.ref) for c in found]

    async def read_completions(
        self, after_id: bytes, block_ms: int, feed: str | None = None, shard: int | None = None
    ) -> list[Completion]:
        """:meth:`read_done`, with the result each entry carries (a producer's feed's small
        results); the whole feed merged when ``shard`` is None (as the sync queue)."""
        if shard is None:
            return await self._read_merged(after_id, block_ms, feed)
        with translate_errors(self._where):
            streams: dict[Any, Any] = {self.keys.feed_stream(feed, shard): after_id}
            reply = await self.client.xread(streams, block=block_ms, count=COMPLETIONS_PAGE)
        return completions_of(reply)

    async def _read_merged(
        self, after_id: bytes, block_ms: int, feed: str | None
    ) -> list[Completion]:
        n = self.feed_shards(feed)
        keys = [self.keys.feed_stream(feed, shard) for shard in range(n)]
        ids = shard_ids(after_id, n)
        with translate_errors(self._where):
            if not self._cluster:
                streams: dict[Any, Any] = dict(zip(keys, ids, strict=True))
                reply = await self.client.xread(streams, block=block_ms, count=COMPLETIONS_PAGE)
                return merge(by_shard(keys, reply), ids)
            pipe = self.client.pipeline(transaction=False)
            for key, last in zip(keys, ids, strict=True):
                pipe.xread({key: last}, count=COMPLETIONS_PAGE)
            found = merge(list(enumerate(await pipe.execute())), ids)
        if not found and block_ms > 0:
            await asyncio.sleep(min(block_ms, MERGED_PAUSE_MS) / 1000)
        return found

    async def close_feed(self, feed: str) -> None:
        """Drop a producer's feed (the producer is closing)."""
        with translate_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            for n in range(self.feed_shards(feed)):  # one slot each: one DEL per shard
                pipe.delete(self.keys.producer_done(feed, n))
            await pipe.execute()
