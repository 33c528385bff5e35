"""The workload: :class:`Plan` says which session and fact each run has, :func:`submit` sends
the runs while keeping at most the window unresolved, and :class:`Tracker` counts the handles
as they resolve."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.soak.config import AGENT, REMEMBER, TENANT
from bench.soak.stack import SoakStack
from tether.core.results import RunStatus
from tether.producer.handle import RunHandle


@dataclass
class Tracker:
    """Counts resolved handles; the window semaphore bounds the unresolved ones."""

    window: int
    completed: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    retried: int = 0
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.slots = threading.BoundedSemaphore(self.window)
        self.cond = threading.Condition()

    def on_done(self, handle: RunHandle) -> None:
        try:
            result = handle.run_result(timeout=0)
            status = result.status.value
            retried = result.attempts > 1
            if result.status is not RunStatus.COMPLETED:
                self._problem(f"{handle.run_id}: {status} {result.error_type}")
        except Exception as exc:  # RunLost and the like: counted, never raised in a callback
            status, retried = type(exc).__name__, False
            self._problem(f"{handle.run_id}: {status}: {exc}")
        with self.cond:
            self.completed += 1
            self.statuses[status] += 1
            self.retried += retried
            self.cond.notify_all()
        self.slots.release()

    def _problem(self, text: str) -> None:
        with self.cond:
            if len(self.problems) < 50:
                self.problems.append(text)

    def wait_for(self, count: int, stall_timeout_s: float) -> bool:
        """Block until ``count`` handles resolved; False after ``stall_timeout_s`` without any."""
        with self.cond:
            last, since = self.completed, time.monotonic()
            while self.completed < count:
                self.cond.wait(1.0)
                if self.completed != last:
                    last, since = self.completed, time.monotonic()
                elif time.monotonic() - since > stall_timeout_s:
                    return False
        return True


class Pacer:
    """Spaces submissions ``1 / rate_per_s`` apart (None: no pacing), never faster.

    Time lost while the window was full (slow storage) is not made up with a burst: a catch-up
    burst (55 runs/s after minutes at 15, in one soak) puts twice a steady minute's runs in
    Redis, and the memory checkpoints compare steady minutes. A sleep's overshoot is made up
    (at most one period), or the rate would drift below the one asked for.
    """

    def __init__(
        self,
        rate_per_s: float | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._period_s = 0.0 if rate_per_s is None else 1.0 / rate_per_s
        self._clock, self._sleep = clock, sleep
        self._due = clock()

    def wait(self) -> None:
        """Sleep until the next submission is due."""
        delay = self._due - self._clock()
        if delay > 0:
            self._sleep(delay)

    def sent(self) -> None:
        """Note a submission made now."""
        self._due = max(self._due, self._clock() - self._period_s) + self._period_s


@dataclass
class Plan:
    """Which session and fact each run has (run ``i`` goes to session ``i % sessions``)."""

    prefix: str
    session_ids: list[str]
    runs: int

    def session_of(self, i: int) -> str:
        return self.session_ids[i % len(self.session_ids)]

    def fact(self, i: int) -> str:
        return f"f{i:07d}"

    def expected(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {sid: [] for sid in self.session_ids}
        for i in range(self.runs):
            out[self.session_of(i)].append(self.fact(i))
        return out


def submit(
    stack: SoakStack,
    plan: Plan,
    tracker: Tracker,
    runs: range,
    stall_timeout_s: float,
    rate_per_s: float | None = None,
) -> bool:
    """Submit ``runs`` in order at ``rate_per_s`` (None: at once), never more than the window
    unresolved; False when no slot freed up for ``stall_timeout_s`` (the runs in flight stopped
    resolving)."""
    pacer = Pacer(rate_per_s)
    for i in runs:
        pacer.wait()
        if not tracker.slots.acquire(timeout=stall_timeout_s):
            return False
        pacer.sent()
        fact = plan.fact(i)
        handle = stack.producer.run_async(
            plan.session_of(i),
            REMEMBER + fact,
            agent=AGENT,
            tenant=TENANT,
            request_id=f"{plan.prefix}-{fact}",
        )
        handle.add_done_callback(tracker.on_done)  # type: ignore[arg-type]
    return True
