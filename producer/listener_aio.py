"""Completion delivery for :class:`~tether.producer.client_aio.AsyncProducer`: the asyncio twin
of :mod:`tether.producer.listener` (tasks of the event loop instead of threads), deciding
through the same book of awaited runs (:mod:`tether.producer.settlement`) and reading the feed
in as many round trips: a batch of completions is one read, plus one pipelined read of the
records whose result the feed entry did not carry."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

from tether.errors import TetherError
from tether.producer.batcher_aio import TurnBatcher
from tether.producer.settlement import (
    BLOCK_MS,
    RECHECK_INTERVAL_S,
    RETRY_PAUSE_S,
    AwaitedRuns,
    Rechecks,
    Settle,
    call_settles,
)
from tether.runs.contract import RunRef, RunResult
from tether.runs.queue.base import Completion

log = logging.getLogger(__name__)


class AsyncRunFeed(Protocol):
    """What a listener reads: run records and a completion feed
    (:class:`~tether.runs.queue.redis_aio.AsyncRedisRunQueue`)."""

    async def peek_many(self, refs: Sequence[RunRef]) -> dict[str, RunResult | None]:
        """For each run with a record, by run id: its result (None while unfinished)."""

    def feed_readers(self, feed: str | None = None) -> list[int | None]:
        """The shards each reader of ``feed`` reads (None: the whole feed)."""

    async def done_last_id(self, feed: str | None = None, shard: int | None = None) -> bytes:
        """The position of the newest completion of ``feed``'s ``shard`` (None: all)."""

    async def read_completions(
        self, after_id: bytes, block_ms: int, feed: str | None = None, shard: int | None = None
    ) -> list[Completion]:
        """Completions of ``feed``'s ``shard`` (None: all) after ``after_id`` (blocks up to
        ``block_ms``), each with the result its entry carries."""


class AsyncCompletionListener:
    """Resolves handles from the completion feed, on tasks of the event loop (one per reader:
    the whole feed on a single Redis, each shard on a cluster), under one that positions them.

    Settle callbacks run on the loop. Create and use it from one event loop.

    Args:
        runs: the run queue the listener reads.
        feed: the completion feed to read (None: the namespace's).
        recheck_interval_s: how often every awaited record is asked directly.
    """

    def __init__(
        self,
        runs: AsyncRunFeed,
        *,
        feed: str | None = None,
        recheck_interval_s: float = RECHECK_INTERVAL_S,
    ) -> None:
        self._runs = runs
        self._feed = feed
        self._awaited = AwaitedRuns()
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        #: What each reader reads: a shard of the feed, or (None) all of it.
        self._lanes = runs.feed_readers(feed)
        #: Each reader's position (None: not known yet).
        self._last_ids: list[bytes | None] = [None] * len(self._lanes)
        self._recheck_interval_s = recheck_interval_s
        self._rechecks = Rechecks(recheck_interval_s)
        self._checks: TurnBatcher[RunRef, None] = TurnBatcher(self._check)
        self._closing = False

    @property
    def feed(self) -> str | None:
        """The completion feed this listener reads (None: the namespace's)."""
        return self._feed

    async def register(
        self, ref: RunRef, settle: Settle, *, queued_after: float | None = None
    ) -> None:
        """Call ``settle`` once with the run's result (now, if it already finished).

        ``queued_after``: ``time.monotonic()`` taken before this listener's producer queued the
        run (see ``CompletionListener.register``): such a run needs no first look at its record.

        Raises:
            StreamUnavailable: Redis did not answer the first check; the run stays registered
                and is resolved once Redis answers.
        """
        self._awaited.add(ref, settle)
        ready = self._start()
        await asyncio.shield(ready)  # the stream position is known: no completion is missed
        if self._awaited.needs_look(ref.run_id, queued_after):
            await self._checks.submit([ref])  # one round trip for every run registered now

    def pending(self) -> int:
        """How many runs are awaited."""
        return len(self._awaited)

    def _start(self) -> asyncio.Future[None]:
        if self._task is None or self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
            self._task = asyncio.create_task(self._loop(self._ready), name="tether-listener")
        return self._ready

    async def aclose(self) -> None:
        """Stop reading (pending handles stay unresolved)."""
        self._closing = True  # redis-py may absorb a cancel that lands in a blocking read
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(task, BLOCK_MS / 1000 + 2)

    async def _peek(self, refs: list[RunRef]) -> dict[str, RunResult | None]:
        try:
            return await self._runs.peek_many(refs)
        except TetherError:
            raise
        except Exception:  # one unreadable record must not stop every other handle
            found: dict[str, RunResult | None] = {}
            for ref in refs:
                try:
                    found.update(await self._runs.peek_many([ref]))
                except TetherError:
                    raise
                except Exception:
                    log.exception("reading run %s failed", ref.run_id)
                    found[ref.run_id] = None  # it exists: never deemed lost
            return found

    async def _check(self, refs: list[RunRef]) -> list[None]:
        """Resolve those of ``refs`` whose record holds a result."""
        if refs:
            self._settle(await self._peek(refs))
        return [None] * len(refs)

    def _settle(self, results: Mapping[str, RunResult | None]) -> None:
        for run_id, result in results.items():
            if result is not None:
                call_settles(run_id, self._awaited.take(run_id), result)

    async def _position(self) -> None:
        """Take every reader's position: completions from here on are read from the feed."""
        for reader in range(len(self._lanes)):
            await self._position_reader(reader)
        self._awaited.positioned()

    async def _position_reader(self, reader: int) -> bytes:
        last_id = await self._runs.done_last_id(self._feed, self._lanes[reader])
        self._last_ids[reader] = last_id
        return last_id

    async def _first_position(self, ready: asyncio.Future[None]) -> None:
        try:
            await self._position()
        except TetherError as exc:  # asked again by the loop; the rechecks cover the gap
            log.warning("completion stream unavailable (%s); retrying", exc)
        finally:
            if not ready.done():
                ready.set_result(None)

    async def _loop(self, ready: asyncio.Future[None]) -> None:
        await self._first_position(ready)
        self._rechecks = Rechecks(self._recheck_interval_s)  # the first a full interval away
        await asyncio.gather(*(self._reader_loop(reader) for reader in range(len(self._lanes))))

    async def _reader_loop(self, reader: int) -> None:
        """Read what reader ``reader`` reads; the first reader also does the rechecks."""
        while not self._closing:
            try:
                last_id = self._last_ids[reader]
                if last_id is None:
                    last_id = await self._position_reader(reader)
                    self._rechecks.soon()  # completions before this position: ask each record
                if reader == 0 and self._rechecks.due():
                    await self._recheck_all()
                await self._read(reader, last_id)
            except TetherError as exc:
                log.warning("completion stream unavailable (%s); retrying", exc)
                self._rechecks.soon()  # the stream may have been lost: ask each run record
                await asyncio.sleep(RETRY_PAUSE_S)
            except Exception:
                log.exception("resolving completed runs failed")
                await asyncio.sleep(RETRY_PAUSE_S)

    async def _read(self, reader: int, after_id: bytes) -> None:
        """Settle the awaited runs of the next batch of completions of ``reader``: from the
        result an entry carries, else from the run's record (one round trip for the batch)."""
        entries = await self._runs.read_completions(
            after_id, BLOCK_MS, self._feed, self._lanes[reader]
        )
        if not entries:
            return
        self._last_ids[reader] = entries[-1].position
        carried, unread = self._awaited.batch(entries)
        self._settle(carried)
        await self._check(unread)

    async def _recheck_all(self) -> None:
        """Ask every awaited run record directly; resolve finished runs and lost ones."""
        refs = self._awaited.refs()
        if refs:
            found = await self._peek(refs)
            self._settle(self._awaited.checked(refs, found))
