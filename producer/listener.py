"""One background thread per producer that resolves every pending handle.

It reads the completion stream with ``XREAD BLOCK`` from the position it had when it started,
so a completion is never missed; a handle registered after its run finished is resolved from the
run record at registration. On a Redis outage it reconnects and re-checks every pending run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from shared.errors import TetherError
from shared.runbook import RunBook
from shared.runs import RunResult

log = logging.getLogger(__name__)

Settle = Callable[[RunResult], None]
BLOCK_MS = 1000


class CompletionListener:
    """Resolves handles from the completion stream."""

    def __init__(self, runbook: RunBook) -> None:
        self._runbook = runbook
        self._waiting: dict[str, list[Settle]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_id: bytes | None = None

    def _start(self) -> None:
        if self._thread is None:
            self._last_id = self._runbook.done_last_id()
            self._thread = threading.Thread(target=self._loop, name="tether-listener", daemon=True)
            self._thread.start()

    def register(self, run_id: str, settle: Settle) -> None:
        """Call ``settle`` once with the run's result (now, if it already finished)."""
        with self._lock:
            self._start()
            self._waiting.setdefault(run_id, []).append(settle)
        self._check(run_id)

    def _check(self, run_id: str) -> None:
        view = self._runbook.get(run_id)
        if view is not None and view.result is not None:
            self._resolve(run_id, view.result)

    def _resolve(self, run_id: str, result: RunResult) -> None:
        with self._lock:
            settles = self._waiting.pop(run_id, [])
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
        while not self._stop.is_set():
            try:
                entries = self._runbook.read_done(self._last_id, BLOCK_MS)
            except TetherError as exc:
                log.warning("completion stream unavailable (%s); retrying", exc)
                if self._stop.wait(0.5):
                    return
                self._recheck_all()
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
        """After an outage the stream may have been lost: ask each run record directly."""
        with self._lock:
            run_ids = list(self._waiting)
        for run_id in run_ids:
            try:
                self._check(run_id)
            except TetherError:
                return
