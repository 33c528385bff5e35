"""More faults for the chaos workload: zombie freezes at the head PUT, and Redis rewound.

- :class:`Freezer` arms the chaos workers' probe (tests/support/chaos_freeze.py): a worker stops
  itself right before a head PUT, lease held; two lease TTLs later (its lease taken over) it is
  thawed and its PUT must be refused.
- :class:`Rewinder` snapshots Redis (SAVE), lets the workload go on for a few seconds, then kills
  redis-server and starts it from that older snapshot, as a restore from an older RDB/AOF does:
  run records, queues, leases, fences and streams all step back while S3 heads do not.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from pathlib import Path

from tests.support.chaos_stack import ChaosStack

CLAIM_TIMEOUT_S = 20.0


class Freezer(threading.Thread):
    """Freezes ``count`` workers at a head PUT, one at a time, and thaws each after 2 TTLs."""

    def __init__(
        self, stack: ChaosStack, rng: random.Random, count: int, gap_s: tuple[float, float]
    ) -> None:
        super().__init__(name="chaos-freezer", daemon=True)
        self.stack = stack
        self.rng = rng
        self.wanted = count
        self.gap_s = gap_s
        self.directory = Path(stack.env["CHAOS_FREEZE_DIR"])
        self.frozen: list[int] = []
        self.stop = threading.Event()
        self.finished = threading.Event()

    def run(self) -> None:
        try:
            while len(self.frozen) < self.wanted and not self.stop.wait(
                self.rng.uniform(*self.gap_s)
            ):
                pid = self._freeze_one()
                if pid is not None:
                    self.frozen.append(pid)
        finally:
            with contextlib.suppress(FileNotFoundError):
                (self.directory / "arm").unlink()
            self.finished.set()

    def _freeze_one(self) -> int | None:
        arm = self.directory / "arm"
        arm.touch()
        deadline = time.monotonic() + CLAIM_TIMEOUT_S
        while arm.exists() and time.monotonic() < deadline and not self.stop.is_set():
            time.sleep(0.02)
        claimed = sorted(self.directory.glob("frozen-*"))
        if not claimed:
            with contextlib.suppress(FileNotFoundError):
                arm.unlink()
            return None
        marker = claimed[0]
        pid = int(marker.name.split("-", 1)[1])
        marker.unlink()
        # frozen past its lease: another worker takes the session over meanwhile
        time.sleep(2 * self.stack.settings.lease_ttl_ms / 1000 + 1.0)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        return pid


class Rewinder(threading.Thread):
    """Rewinds Redis ``count`` times: SAVE, ``window_s`` of workload, SIGKILL, start from it."""

    def __init__(
        self,
        stack: ChaosStack,
        rng: random.Random,
        count: int,
        gap_s: tuple[float, float],
        window_s: float = 3.0,
    ) -> None:
        super().__init__(name="chaos-rewinder", daemon=True)
        self.stack = stack
        self.rng = rng
        self.wanted = count
        self.gap_s = gap_s
        self.window_s = window_s
        self.rewinds: list[float] = []
        self.stop = threading.Event()
        self.finished = threading.Event()

    def run(self) -> None:
        try:
            while len(self.rewinds) < self.wanted and not self.stop.wait(
                self.rng.uniform(*self.gap_s)
            ):
                client = self.stack.broker_client()  # rewinds need a single redis-server
                try:
                    workdir = Path(client.config_get("dir")["dir"])
                    client.save()  # the older snapshot the server will come back from
                finally:
                    client.close()
                time.sleep(self.window_s)  # runs commit to S3 meanwhile: heads move ahead
                self.stack.redis.kill()
                self.stack.redis.start()  # loads dump.rdb: the state of window_s ago
                # later restarts of the shared stack must start empty, as they always did
                (workdir / "dump.rdb").unlink()
                self.rewinds.append(time.monotonic())
        finally:
            self.finished.set()
