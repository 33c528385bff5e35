"""A Celery beat process for the run schedules (``tether beat``), for tests and local stacks."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from tether.dev.workers import WorkerProcess


class BeatProcess(WorkerProcess):
    """One ``celery -A tether.producer.schedules.beat beat`` process group; ready once beat
    started (a second beat then waits for the first one's lock, see docs/schedules.md).

    Args:
        name: names its log file (``<name>.log`` in ``log_dir``).
        env: the environment (``TETHER_*`` settings).
        log_dir: where its log file goes.
        max_interval_s: longest sleep of the beat loop; the lock outlives five of them.
    """

    ready_mark = "beat: Starting..."

    def __init__(
        self, name: str, env: Mapping[str, str], log_dir: Path, *, max_interval_s: int = 1
    ) -> None:
        super().__init__(name, env, log_dir)
        self.max_interval_s = max_interval_s

    def command(self) -> list[str]:
        """The command line."""
        return [
            *(sys.executable, "-m", "celery", "-A", "tether.producer.schedules.beat", "beat"),
            *("-l", "INFO", "--max-interval", str(self.max_interval_s)),
        ]
