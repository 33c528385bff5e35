"""One background thread per producer that resolves every pending handle.

It reads the completion stream with ``XREAD BLOCK`` from the position it had when it started,
so a completion is never missed; a handle registered after its run finished is resolved from the
run record at registration. Every :data:`RECHECK_INTERVAL_S` (and after a Redis outage) it also
asks the run records of every awaited run directly, in one pipelined round trip: a completion
announced while the stream was unreachable is then picked up, and a run whose record vanished
(Redis restarted without persistence, or the record expired) is resolved with
:class:`~tether.errors.RunLost` once it was missing at :data:`LOST_AFTER_MISSES` consecutive
checks, so no handle waits forever for a run that no longer exists.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from tether.core.results import RunStatus
from tether.errors import RunLost, TetherError
from tether.runs.contract import RunResult
from tether.runs.queue.base import Completions, Submissions

log = logging.getLogger(__name__)

Settle = Callable[[RunResult], None]
BLOCK_MS = 1000
#: How often every awaited run record is checked directly.
RECHECK_INTERVAL_S = 2.0
#: A run is declared lost after its record was missing at this many consecutive checks (the
#: first check may come before a run submitted from another process has its record).
LOST_AFTER_MISSES = 2


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


class RunFeed(Submissions, Completions, Protocol):
    """What a listener reads: run records and the completion feed."""


class CompletionListener:
    """Resolves handles from the completion stream."""

    def __init__(self, runs: RunFeed, *, recheck_interval_s: float = RECHECK_INTERVAL_S) -> None:
        self._runs = runs
        self._waiting: dict[str, list[Settle]] = {}
        self._misses: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_id: bytes | None = None
        self._recheck_interval_s = recheck_interval_s

    def _start(self) -> None:
        if self._thread is None:
            self._last_id = self._runs.done_last_id()
            self._thread = threading.Thread(target=self._loop, name="tether-listener", daemon=True)
            self._thread.start()

    def register(self, run_id: str, settle: Settle) -> None:
        """Call ``settle`` once with the run's result (now, if it already finished)."""
        with self._lock:
            self._start()
            self._waiting.setdefault(run_id, []).append(settle)
        self._check(run_id)

    def _check(self, run_id: str) -> None:
        view = self._runs.get(run_id)
        if view is not None and view.result is not None:
            self._resolve(run_id, view.result)

    def _resolve(self, run_id: str, result: RunResult) -> None:
        with self._lock:
            settles = self._waiting.pop(run_id, [])
            self._misses.pop(run_id, None)
        for settle in settles:
            try:
                settle(result)
            except Exception:
                log.exception("settling handle %s failed", run_id)

    def pending(self) -> int:
        """How many runs are awaited."""
        with self._lock:
            return len(self._waiting)

    def close(self) -> None:
        """Stop the thread (pending handles stay unresolved)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=BLOCK_MS / 1000 + 2)

    def _loop(self) -> None:
        assert self._last_id is not None
        next_recheck = time.monotonic() + self._recheck_interval_s
        while not self._stop.is_set():
            if time.monotonic() >= next_recheck:
                next_recheck = time.monotonic() + self._recheck_interval_s
                self._recheck_all()
            try:
                entries = self._runs.read_done(self._last_id, BLOCK_MS)
            except TetherError as exc:
                log.warning("completion stream unavailable (%s); retrying", exc)
                if self._stop.wait(0.5):
                    return
                next_recheck = 0.0  # the stream may have been lost: ask each run record
                continue
            for entry_id, run_id in entries:
                self._last_id = entry_id
                with self._lock:
                    wanted = run_id in self._waiting
                if wanted:
                    try:
                        self._check(run_id)
                    except Exception:  # one bad record must not stop every other handle
                        log.exception("reading run %s failed", run_id)

    def _recheck_all(self) -> None:
        """Ask every awaited run record directly; resolve finished runs and lost ones."""
        with self._lock:
            run_ids = list(self._waiting)
        if not run_ids:
            return
        try:
            found = self._runs.peek_many(run_ids)
        except TetherError:
            return  # Redis still away: the next check tries again
        except Exception:
            log.exception("re-checking %d awaited runs failed", len(run_ids))
            return
        lost: list[str] = []
        with self._lock:
            for run_id in run_ids:
                if run_id in found:
                    self._misses.pop(run_id, None)
                elif run_id in self._waiting:
                    misses = self._misses.get(run_id, 0) + 1
                    self._misses[run_id] = misses
                    if misses >= LOST_AFTER_MISSES:
                        lost.append(run_id)
        for run_id, result in found.items():
            if result is not None:
                self._resolve(run_id, result)
        for run_id in lost:
            log.warning("run %s has no record any more; resolving its handle as lost", run_id)
            self._resolve(run_id, lost_result(run_id))
