"""The recovery sweeper thread of a worker's main process (see
:mod:`tether.worker.engine.recovery`)."""

from __future__ import annotations

import logging
import threading
import time

from tether.errors import TetherError
from tether.worker.engine.recovery import sweep_once, unclaimed_every_s
from tether.worker.engine.services import EngineServices

log = logging.getLogger(__name__)


class Sweeper:
    """A daemon thread calling :func:`~tether.worker.engine.recovery.sweep_once` every
    ``sweep_interval_ms``."""

    def __init__(self, services: EngineServices) -> None:
        self._services = services
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tether-sweeper", daemon=True)

    def start(self) -> Sweeper:
        """Start sweeping."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sweeping."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        interval_s = self._services.settings.sweep_interval_ms / 1000
        every_s = unclaimed_every_s(self._services)
        unclaimed_at_s = -every_s
        while not self._stop.wait(interval_s):
            try:
                now_s = time.monotonic()
                unclaimed = now_s - unclaimed_at_s >= every_s
                sweep_once(self._services, unclaimed=unclaimed)
                if unclaimed:
                    unclaimed_at_s = now_s
            except TetherError as exc:  # Redis away: try again next period
                log.warning("sweep failed: %s", exc)
            except Exception:
                log.exception("sweep failed unexpectedly")
