"""The chaos: :class:`Killer` SIGKILLs a random worker on a timer and restarts it (never the
last one serving), recording each :class:`Kill`."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from tether.dev.workers import WorkerProcess


@dataclass
class Kill:
    """One SIGKILL: when (s since the start), which worker, how long its restart took."""

    at_s: float
    worker: str
    restart_s: float | None = None


class Killer(threading.Thread):
    """SIGKILLs a random worker every ``every_s`` and restarts it; one worker always serves."""

    def __init__(
        self,
        workers: list[WorkerProcess],
        every_s: float,
        max_kills: int | None,
        rng: random.Random,
        started: float,
    ) -> None:
        super().__init__(name="soak-killer", daemon=True)
        self.workers = workers
        self.every_s = every_s
        self.max_kills = max_kills
        self.rng = rng
        self.started = started
        self.stop = threading.Event()
        self.kills: list[Kill] = []
        self.restarters: list[threading.Thread] = []
        self.lock = threading.Lock()
        self._restarting: set[str] = set()

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            if self.max_kills is not None and len(self.kills) >= self.max_kills:
                return
            with self.lock:
                ready = [w for w in self.workers if w.alive() and w.name not in self._restarting]
                if len(ready) < 2:
                    continue
                victim = self.rng.choice(ready)
                self._restarting.add(victim.name)
            victim.kill()
            kill = Kill(round(time.monotonic() - self.started, 1), victim.name)
            self.kills.append(kill)
            thread = threading.Thread(target=self._restart, args=(victim, kill), daemon=True)
            thread.start()
            self.restarters.append(thread)

    def _restart(self, victim: WorkerProcess, kill: Kill) -> None:
        began = time.monotonic()
        try:
            victim.start(wait=True, timeout_s=180)
            kill.restart_s = round(time.monotonic() - began, 1)
        finally:
            with self.lock:
                self._restarting.discard(victim.name)

    def finish(self) -> None:
        """Stop killing and wait until every killed worker serves again."""
        self.stop.set()
        self.join()
        for thread in self.restarters:
            thread.join()
