"""The run schedules a console shows (its tenant's), with their last and next ticks and the last
tick's run (see :mod:`tether.producer.schedules`)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from tether.producer.ops.console.backends import Backends

if TYPE_CHECKING:
    from tether.producer.schedules import Schedules


class ScheduleSource:
    """The console's :class:`Schedules` (one Redis connection, opened on the first view)."""

    def __init__(self, b: Backends) -> None:
        self._b = b
        self._schedules: Schedules | None = None
        self._lock = threading.Lock()

    def rows(self, tenant: str) -> list[dict[str, Any]] | None:
        """``tenant``'s schedules as JSON-ready rows; None without celery-redbeat installed."""
        try:
            from tether.producer.schedules import Schedules
        except ImportError:  # pragma: no cover - the `schedules` extra is not installed
            return None
        with self._lock:
            if self._schedules is None:
                self._schedules = Schedules(self._b.settings)
        return [v.as_dict() for v in self._schedules.list(tenant=tenant)]
