"""The recovery sweeper thread of a worker's main process (see
:mod:`tether.worker.engine.recovery`)."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable

from tether.errors import TetherError
from tether.worker.engine.recovery import sweep_once, unclaimed_every_s
from tether.worker.engine.services import EngineServices
from tether.worker.engine.wait_reconcile import reconcile_waits
from tether.worker.engine.wakes import NextPass, next_pass, wake_due

log = logging.getLogger(__name__)


class Sweeper:
    """A daemon thread calling :func:`~tether.worker.engine.recovery.sweep_once` every
    ``sweep_interval_ms``."""

    def __init__(self, services: EngineServices) -> None:
        self._services = services
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tether-sweeper", daemon=True)
        # its own thread: a wake is submitted when its call is due, not at the next sweep
        self._timers = threading.Thread(target=self._wake_loop, name="tether-timers", daemon=True)
        self._again = False  # a reconcile skipped sessions: the next pass looks again

    def start(self) -> Sweeper:
        """Start sweeping."""
        self._thread.start()
        self._timers.start()
        return self

    def stop(self) -> None:
        """Stop sweeping."""
        self._stop.set()
        self._thread.join(timeout=5)
        self._timers.join(timeout=5)

    def _reconcile(self) -> None:
        """Reconcile the marks, when no other worker took this period's turn."""
        services, index = self._services, self._services.waits
        ttl_ms = int(services.settings.wait_reconcile_s * 1000)
        if index is not None and index.take_reconcile(services.worker_id, ttl_ms):
            self._again = reconcile_waits(services).skipped > 0

    def _reconcile_if_lost(self) -> None:
        """Reconcile at once when the index was lost (a flushed Redis, or one gone back to an
        older state: then deep), whoever's turn it is, and again at each pass while sessions
        were skipped (a worker was on them)."""
        index = self._services.waits
        lost = index is not None and index.lost()
        if lost or self._again:
            self._again = reconcile_waits(self._services, deep=lost).skipped > 0

    def _wake_loop(self) -> None:
        interval_s = self._services.settings.sweep_interval_ms / 1000
        upcoming = NextPass(0.0, take=True)
        while not self._stop.wait(upcoming.pause_s):
            if upcoming.take:
                _guarded("timer wake", functools.partial(wake_due, self._services))
            upcoming = NextPass(interval_s, take=True)  # Redis away: the next pass takes
            with contextlib.suppress(Exception):
                upcoming = next_pass(self._services, interval_s)

    def _loop(self) -> None:
        settings = self._services.settings
        interval_s = settings.sweep_interval_ms / 1000
        every_s = unclaimed_every_s(self._services)
        unclaimed_at_s = -every_s
        reconciled_at_s = -settings.wait_reconcile_s
        while not self._stop.wait(interval_s):
            now_s = time.monotonic()
            unclaimed = now_s - unclaimed_at_s >= every_s
            reconcile = now_s - reconciled_at_s >= settings.wait_reconcile_s
            if _guarded(
                "sweep", functools.partial(sweep_once, self._services, unclaimed=unclaimed)
            ):
                unclaimed_at_s = now_s if unclaimed else unclaimed_at_s
            if reconcile and _guarded("wait reconcile", self._reconcile):
                reconciled_at_s = now_s
            elif _guarded("wait index check", self._reconcile_if_lost):
                pass


def _guarded(what: str, action: Callable[[], object]) -> bool:
    """Run one part of a pass; True when it ran through (a failure is logged: the next period
    tries again)."""
    try:
        action()
        return True
    except TetherError as exc:  # Redis or the store away: try again next period
        log.warning("%s failed: %s", what, exc)
    except Exception:
        log.exception("%s failed unexpectedly", what)
    return False
