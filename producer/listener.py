"""Completion delivery for :class:`~tether.producer.client.Producer`: one listener per producer
and tenant, on a daemon thread, resolves every awaited run; its asyncio twin is
:mod:`tether.producer.listener_aio`, and both decide through the book of awaited runs of
:mod:`tether.producer.settlement`:

- they read the completion feed's shards with ``XREAD BLOCK``: all in one read on a single
  Redis, each with its own reader (a thread, a task) on a cluster, where one command cannot
  name keys of several slots; from the position they had when they started, so a completion
  is never missed; a producer's feed entry carries a small result, so a batch of completions
  costs that one read, plus one pipelined read of the records of the awaited runs whose result
  did not fit;
- a run registered after it finished is resolved from its record at registration (a run its
  producer queued after the position was taken needs no such look);
- every :data:`~tether.producer.settlement.RECHECK_INTERVAL_S` (and after a Redis outage) they
  ask the records of every awaited run directly: a completion announced while the stream was
  unreachable is then picked up, and a run whose record vanished (Redis restarted without
  persistence, or the record expired) is resolved with :class:`~tether.errors.RunLost` once it
  was missing at :data:`~tether.producer.settlement.LOST_AFTER_MISSES` consecutive checks, so
  no handle waits forever for a run that no longer exists.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Protocol

from tether.errors import TetherError
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


class RunFeed(Protocol):
    """What a listener reads: run records and a completion feed
    (:class:`~tether.runs.queue.redis.RedisRunQueue`)."""

    def peek_many(self, refs: Sequence[RunRef]) -> dict[str, RunResult | None]:
        """For each run with a record, by run id: its result (None while unfinished)."""

    def feed_readers(self, feed: str | None = None) -> list[int | None]:
        """The shards each reader of ``feed`` reads (None: the whole feed)."""

    def done_last_id(self, feed: str | None = None, shard: int | None = None) -> bytes:
        """The position of the newest completion of ``feed``'s ``shard`` (None: all)."""

    def read_completions(
        self, after_id: bytes, block_ms: int, feed: str | None = None, shard: int | None = None
    ) -> list[Completion]:
        """Completions of ``feed``'s ``shard`` (None: all) after ``after_id`` (blocks up to
        ``block_ms``), each with the result its entry carries."""


class CompletionListener:
    """Resolves handles from the completion stream, on one daemon thread.

    Args:
        runs: the run queue the listener reads.
        feed: the completion feed to read (None: the namespace's).
        recheck_interval_s: how often every awaited record is asked directly.
    """

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
        self._threads: list[threading.Thread] = []
        #: What each reader reads: a shard of the feed, or (None) all of it.
        self._lanes = runs.feed_readers(feed)
        #: Each reader's position (None: not known yet).
        self._last_ids: list[bytes | None] = [None] * len(self._lanes)
        self._recheck_interval_s = recheck_interval_s
        self._rechecks = Rechecks(recheck_interval_s)

    @property
    def feed(self) -> str | None:
        """The completion feed this listener reads (None: the namespace's)."""
        return self._feed

    def _start(self) -> None:
        if not self._threads:
            try:
                self._position()
            except TetherError as exc:  # the threads ask again; the rechecks cover the gap
                log.warning("completion stream unavailable (%s); retrying", exc)
            self._rechecks = Rechecks(self._recheck_interval_s)  # the first an interval away
            for reader in range(len(self._lanes)):
                thread = threading.Thread(
                    target=self._loop, args=(reader,), name="tether-listener", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _position(self) -> None:
        """Take every reader's position: completions from here on are read from the feed."""
        for reader in range(len(self._lanes)):
            self._position_reader(reader)
        self._awaited.positioned()

    def _position_reader(self, reader: int) -> bytes:
        last_id = self._runs.done_last_id(self._feed, self._lanes[reader])
        self._last_ids[reader] = last_id
        return last_id

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
            look = self._awaited.needs_look(ref.run_id, queued_after)
        if look:  # its completion may be behind the feed position: read its record
            self._check([ref])

    def pending(self) -> int:
        """How many runs are awaited."""
        with self._lock:
            return len(self._awaited)

    def close(self) -> None:
        """Stop reading (pending handles stay unresolved).

        The threads are not joined: each may sit in a blocking read for up to ``BLOCK_MS``,
        which every ``tether`` command would add to its exit. The daemon threads leave at their
        next wake-up (at once when their producer closes the Redis client under them), quietly.
        """
        self._stop.set()

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
        if refs:
            self._settle(self._peek(refs))

    def _settle(self, results: Mapping[str, RunResult | None]) -> None:
        for run_id, result in results.items():
            if result is not None:
                with self._lock:
                    settles = self._awaited.take(run_id)
                call_settles(run_id, settles, result)

    def _loop(self, reader: int) -> None:
        """Read what reader ``reader`` reads; the first reader also does the rechecks."""
        while not self._stop.is_set():
            try:
                last_id = self._last_ids[reader]
                if last_id is None:
                    last_id = self._position_reader(reader)
                    self._rechecks.soon()  # completions before this position: ask each record
                if reader == 0 and self._rechecks.due():
                    self._recheck_all()
                self._read(reader, last_id)
            except TetherError as exc:
                if self._stop.is_set():  # closed under a blocking read: nothing was lost
                    return
                log.warning("completion stream unavailable (%s); retrying", exc)
                self._rechecks.soon()  # the stream may have been lost: ask each run record
                if self._stop.wait(RETRY_PAUSE_S):
                    return
            except Exception:
                if self._stop.is_set():
                    return
                log.exception("resolving completed runs failed")
                if self._stop.wait(RETRY_PAUSE_S):
                    return

    def _read(self, reader: int, after_id: bytes) -> None:
        """Settle the awaited runs of the next batch of completions of ``reader``: from the
        result an entry carries, else from the run's record (one round trip for the batch)."""
        entries = self._runs.read_completions(after_id, BLOCK_MS, self._feed, self._lanes[reader])
        if not entries:
            return
        self._last_ids[reader] = entries[-1].position
        with self._lock:
            carried, unread = self._awaited.batch(entries)
        self._settle(carried)
        self._check(unread)

    def _recheck_all(self) -> None:
        """Ask every awaited run record directly; resolve finished runs and lost ones."""
        with self._lock:
            refs = self._awaited.refs()
        if not refs:
            return
        found = self._peek(refs)
        with self._lock:
            settled = self._awaited.checked(refs, found)
        self._settle(settled)
