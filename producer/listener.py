"""Completion delivery: one listener per producer resolves every awaited run.

:class:`CompletionListener` (a background thread, for :class:`~tether.producer.client.Producer`)
and :class:`AsyncCompletionListener` (an asyncio task, for
:class:`~tether.producer.aio.AsyncProducer`) do the same thing around one sans-IO book of awaited
runs (:class:`AwaitedRuns`):

- they read the completion stream with ``XREAD BLOCK`` from the position it had when they
  started, so a completion is never missed, and ask the records of the awaited runs among each
  batch of completions in one pipelined round trip;
- a run registered after it finished is resolved from its record at registration;
- every :data:`RECHECK_INTERVAL_S` (and after a Redis outage) they ask the records of every
  awaited run directly: a completion announced while the stream was unreachable is then picked
  up, and a run whose record vanished (Redis restarted without persistence, or the record
  expired) is resolved with :class:`~tether.errors.RunLost` once it was missing at
  :data:`LOST_AFTER_MISSES` consecutive checks, so no handle waits forever for a run that no
  longer exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from tether.core.results import RunStatus
from tether.errors import RunLost, TetherError
from tether.producer.aio_batch import TurnBatcher
from tether.runs.contract import RunRef, RunResult
from tether.runs.queue.base import Completion, Completions, Submissions

log = logging.getLogger(__name__)

Settle = Callable[[RunResult], None]
BLOCK_MS = 1000
#: How often every awaited run record is checked directly.
RECHECK_INTERVAL_S = 2.0
#: A run is declared lost after its record was missing at this many consecutive checks (the
#: first check may come before a run submitted from another process has its record).
LOST_AFTER_MISSES = 2
#: Completions remembered after they went by unawaited (a run registered later is looked up).
SEEN_MAX = 10_000
#: Pause after a failed read of the completion stream.
RETRY_PAUSE_S = 0.5


def lost_result(run_id: str) -> RunResult:
    """The FAILED result given to a handle whose run record vanished (ids filled by the handle)."""
    error = RunLost(
        f"run {run_id}: its record vanished from Redis (restarted without persistence, or the "
        "record expired after TETHER_RESULT_TTL_S); whether it was applied is recorded in the "
        "session head. Submit it again with the same request_id: it is applied at most once"
    )
    return RunResult(
        run_id=run_id,
        request_id="",
        session_id="",
        tenant="",
        status=RunStatus.FAILED,
        error_type=error.error_type,
        error_message=str(error),
    )


class AwaitedRuns:
    """The runs a listener resolves, who waits on each, and how often each was missing (no I/O,
    no locking: the threaded listener locks around it, the asyncio one runs on one loop)."""

    def __init__(self) -> None:
        self._settles: dict[str, list[Settle]] = {}
        self._refs: dict[str, RunRef] = {}
        self._misses: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._settles)

    def add(self, ref: RunRef, settle: Settle) -> None:
        """Await run ``ref`` on behalf of ``settle``."""
        self._refs[ref.run_id] = ref
        self._settles.setdefault(ref.run_id, []).append(settle)

    def wanted(self, run_ids: Sequence[str]) -> list[RunRef]:
        """Those of ``run_ids`` that are awaited."""
        return [self._refs[r] for r in run_ids if r in self._settles]

    def refs(self) -> list[RunRef]:
        """Every awaited run."""
        return [self._refs[r] for r in self._settles]

    def take(self, run_id: str) -> list[Settle]:
        """Stop awaiting ``run_id``; who waited on it."""
        self._misses.pop(run_id, None)
        self._refs.pop(run_id, None)
        return self._settles.pop(run_id, [])

    def note_check(self, checked: Sequence[RunRef], found: Mapping[str, object]) -> list[str]:
        """Count the runs of a full check that had no record; those now deemed lost."""
        lost: list[str] = []
        for _, _, run_id in checked:
            if run_id in found:
                self._misses.pop(run_id, None)
            elif run_id in self._settles:
                misses = self._misses.get(run_id, 0) + 1
                self._misses[run_id] = misses
                if misses >= LOST_AFTER_MISSES:
                    lost.append(run_id)
        return lost


def call_settles(run_id: str, settles: list[Settle], result: RunResult) -> None:
    """Hand ``result`` to everyone who waited on the run (one failing callback stops none)."""
    for settle in settles:
        try:
            settle(result)
        except Exception:
            log.exception("settling handle %s failed", run_id)


def done_run_ids(entries: Sequence[tuple[bytes, RunRef]]) -> list[str]:
    """The run ids of a batch of completion entries, each once."""
    return list(dict.fromkeys(ref.run_id for _entry_id, ref in entries))


class RunFeed(Submissions, Completions, Protocol):
    """What a listener reads: run records and the completion feed."""


class CompletionListener:
    """Resolves handles from the completion stream, on one daemon thread."""

    def __init__(
        self,
        runs: RunFeed,
        *,
        feed: str | None = None,
        recheck_interval_s: float = RECHECK_INTERVAL_S,
    ) -> None:
        self._runs = runs
        self._feed = feed
        self._awaited = AwaitedRuns()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_id: bytes | None = None
        self._recheck_interval_s = recheck_interval_s
        #: ``time.monotonic()`` once the feed position was first known (None: not yet).
        self._positioned_at: float | None = None
        #: Completions read while nobody awaited them (newest last), so a run registered after
        #: its completion went by is looked up, not waited for; and when the oldest was dropped.
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._seen_dropped_at = 0.0

    @property
    def feed(self) -> str | None:
        """The completion feed this listener reads (None: the namespace's)."""
        return self._feed

    def _start(self) -> None:
        if self._thread is None:
            try:
                self._last_id = self._runs.done_last_id(self._feed)
                self._positioned_at = time.monotonic()
            except TetherError as exc:  # the thread asks again; the rechecks cover the gap
                log.warning("completion stream unavailable (%s); retrying", exc)
            self._thread = threading.Thread(target=self._loop, name="tether-listener", daemon=True)
            self._thread.start()

    def register(self, ref: RunRef, settle: Settle, *, queued_after: float | None = None) -> None:
        """Call ``settle`` once with the run's result (now, if it already finished).

        ``queued_after``: ``time.monotonic()`` taken before this listener's producer queued the
        run. A run queued after the listener knew its feed position cannot have finished before
        it, so its completion is read from the feed and the first look at its record is skipped
        (the periodic rechecks still cover a lost feed).

        Raises:
            StreamUnavailable: Redis did not answer the first check; the run stays registered
                and is resolved once Redis answers.
        """
        with self._lock:
            self._awaited.add(ref, settle)
            self._start()
            unseen = (
                queued_after is not None
                and self._positioned_at is not None
                and self._positioned_at < queued_after
                and self._seen_dropped_at < queued_after
                and ref.run_id not in self._seen
            )
        if unseen:  # its completion is still ahead of the feed position: the feed settles it
            return
        self._check([ref])

    def _remember(self, run_ids: Sequence[str]) -> None:
        """Note completions that went by unawaited (call with the lock held)."""
        for run_id in run_ids:
            self._seen[run_id] = None
            self._seen.move_to_end(run_id)
        while len(self._seen) > SEEN_MAX:
            self._seen.popitem(last=False)
            self._seen_dropped_at = time.monotonic()

    def _peek(self, refs: list[RunRef]) -> dict[str, RunResult | None]:
        try:
            return self._runs.peek_many(refs)
        except TetherError:
            raise
        except Exception:  # one unreadable record must not stop every other handle
            found: dict[str, RunResult | None] = {}
            for ref in refs:
                try:
                    found.update(self._runs.peek_many([ref]))
                except TetherError:
                    raise
                except Exception:
                    log.exception("reading run %s failed", ref.run_id)
                    found[ref.run_id] = None  # it exists: never deemed lost
            return found

    def _check(self, refs: list[RunRef]) -> None:
        """Resolve those of ``refs`` whose record holds a result."""
        if not refs:
            return
        for run_id, result in self._peek(refs).items():
            if result is not None:
                self._resolve(run_id, result)

    def _resolve(self, run_id: str, result: RunResult) -> None:
        with self._lock:
            settles = self._awaited.take(run_id)
        call_settles(run_id, settles, result)

    def pending(self) -> int:
        """How many runs are awaited."""
        with self._lock:
            return len(self._awaited)

    def close(self) -> None:
        """Stop the thread (pending handles stay unresolved).

        It is not joined: it may sit in a blocking read for up to ``BLOCK_MS``, which every
        ``tether`` command would add to its exit. The daemon thread leaves at its next wake-up
        (at once when its producer closes the Redis client under it), quietly.
        """
        self._stop.set()

    def _loop(self) -> None:
        next_recheck = time.monotonic() + self._recheck_interval_s
        while not self._stop.is_set():
            try:
                if self._last_id is None:
                    self._last_id = self._runs.done_last_id(self._feed)
                    self._positioned_at = time.monotonic()
                    next_recheck = 0.0  # completions before this position: ask each record
                if time.monotonic() >= next_recheck:
                    next_recheck = time.monotonic() + self._recheck_interval_s
                    self._recheck_all()
                entries = self._runs.read_completions(self._last_id, BLOCK_MS, self._feed)
                if entries:
                    self._last_id = entries[-1].position
                    self._settle_batch(entries)
            except TetherError as exc:
                if self._stop.is_set():  # closed under a blocking read: nothing was lost
                    return
                log.warning("completion stream unavailable (%s); retrying", exc)
                next_recheck = 0.0  # the stream may have been lost: ask each run record
                if self._stop.wait(RETRY_PAUSE_S):
                    return
            except Exception:
                if self._stop.is_set():
                    return
                log.exception("resolving completed runs failed")
                if self._stop.wait(RETRY_PAUSE_S):
                    return

    def _settle_batch(self, entries: Sequence[Completion]) -> None:
        """Settle the awaited runs of a batch of completions: from the result an entry carries,
        else from the run's record (one round trip for the batch)."""
        carried = {c.ref.run_id: c.result for c in entries if c.result is not None}
        run_ids = list(dict.fromkeys(c.ref.run_id for c in entries))
        with self._lock:
            wanted = self._awaited.wanted(run_ids)
            awaited = {ref.run_id for ref in wanted}
            self._remember([r for r in run_ids if r not in awaited])
        for ref in wanted:
            if ref.run_id in carried:
                self._resolve(ref.run_id, carried[ref.run_id])
        self._check([ref for ref in wanted if ref.run_id not in carried])

    def _recheck_all(self) -> None:
        """Ask every awaited run record directly; resolve finished runs and lost ones."""
        with self._lock:
            refs = self._awaited.refs()
        if not refs:
            return
        found = self._peek(refs)
        with self._lock:
            lost = self._awaited.note_check(refs, found)
        for run_id, result in found.items():
            if result is not None:
                self._resolve(run_id, result)
        for run_id in lost:
            log.warning("run %s has no record any more; resolving its handle as lost", run_id)
            self._resolve(run_id, lost_result(run_id))


class AsyncRunFeed(Protocol):
    """What the asyncio listener reads (:class:`~tether.runs.queue.redis.aio.AsyncRunQueue`)."""

    async def peek_many(self, refs: Sequence[RunRef]) -> dict[str, RunResult | None]:
        """For each run with a record, by run id: its result (None while unfinished)."""

    async def done_last_id(self, feed: str | None = None) -> bytes:
        """The position of the newest completion of ``feed``."""

    async def read_done(
        self, after_id: bytes, block_ms: int, feed: str | None = None
    ) -> list[tuple[bytes, RunRef]]:
        """Completions of ``feed`` after ``after_id`` (blocks up to ``block_ms``)."""


class AsyncCompletionListener:
    """Resolves async handles from the completion stream, on one task of the event loop.

    Settle callbacks run on the loop. Create and use it from one event loop.
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
        self._last_id: bytes | None = None
        self._recheck_interval_s = recheck_interval_s
        self._checks: TurnBatcher[RunRef, None] = TurnBatcher(self._check)
        self._closing = False

    @property
    def feed(self) -> str | None:
        """The completion feed this listener reads (None: the namespace's)."""
        return self._feed

    async def register(self, ref: RunRef, settle: Settle) -> None:
        """Call ``settle`` once with the run's result (now, if it already finished).

        Raises:
            StreamUnavailable: Redis did not answer the first check; the run stays registered
                and is resolved once Redis answers.
        """
        self._awaited.add(ref, settle)
        ready = self._start()
        await asyncio.shield(ready)  # the stream position is known: no completion is missed
        await self._checks.submit([ref])  # one round trip for every run registered now

    def pending(self) -> int:
        """How many runs are awaited."""
        return len(self._awaited)

    def _start(self) -> asyncio.Future[None]:
        if self._task is None or self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
            self._task = asyncio.create_task(self._loop(self._ready), name="tether-listener")
        return self._ready

    async def close(self) -> None:
        """Stop the task (pending handles stay unresolved)."""
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
        if refs:
            for run_id, result in (await self._peek(refs)).items():
                if result is not None:
                    call_settles(run_id, self._awaited.take(run_id), result)
        return [None] * len(refs)

    async def _position(self, ready: asyncio.Future[None]) -> None:
        try:
            self._last_id = await self._runs.done_last_id(self._feed)
        except TetherError as exc:  # asked again by the loop; the rechecks cover the gap
            log.warning("completion stream unavailable (%s); retrying", exc)
        finally:
            if not ready.done():
                ready.set_result(None)

    async def _loop(self, ready: asyncio.Future[None]) -> None:
        await self._position(ready)
        next_recheck = time.monotonic() + self._recheck_interval_s
        while not self._closing:
            try:
                if self._last_id is None:
                    self._last_id = await self._runs.done_last_id(self._feed)
                    next_recheck = 0.0
                if time.monotonic() >= next_recheck:
                    next_recheck = time.monotonic() + self._recheck_interval_s
                    await self._recheck_all()
                entries = await self._runs.read_done(self._last_id, BLOCK_MS, self._feed)
                if entries:
                    self._last_id = entries[-1][0]
                    await self._check(self._awaited.wanted(done_run_ids(entries)))
            except TetherError as exc:
                log.warning("completion stream unavailable (%s); retrying", exc)
                next_recheck = 0.0
                await asyncio.sleep(RETRY_PAUSE_S)
            except Exception:
                log.exception("resolving completed runs failed")
                await asyncio.sleep(RETRY_PAUSE_S)

    async def _recheck_all(self) -> None:
        refs = self._awaited.refs()
        if not refs:
            return
        found = await self._peek(refs)
        lost = self._awaited.note_check(refs, found)
        for run_id, result in found.items():
            if result is not None:
                call_settles(run_id, self._awaited.take(run_id), result)
        for run_id in lost:
            log.warning("run %s has no record any more; resolving its handle as lost", run_id)
            call_settles(run_id, self._awaited.take(run_id), lost_result(run_id))
