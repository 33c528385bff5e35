"""What the run being executed waits for, made visible: its record says "model budget" (so
``tether status``, the console and ``tether wait`` show it) while a model call waits for its
fleet-wide budget, and a metric counts the waits. Nothing is written for a run that never
waits."""

from __future__ import annotations

import time

from tether.errors import RunCancelled, RunInterrupted, RunTimeout
from tether.observability import metrics
from tether.runs.contract import RunRef
from tether.runs.limits.base import WaitReason
from tether.runs.queue.base import RunQueue, StopMode

MODEL_BUDGET = "model budget"


#: How often a run waiting for model budget looks for a stop request (s).
STOP_CHECK_S = 1.0


class WaitNotice:
    """The :data:`~tether.runs.limits.gate.budget_waits` hook of one run.

    It also ends the wait when the run is stopped or past its deadline (``deadline_s``,
    monotonic): a wait is inside a step, where the loop's own checks do not look, and a model
    paused for a long time would otherwise keep a cancelled run waiting, holding its slot."""

    def __init__(self, runs: RunQueue, ref: RunRef, deadline_s: float | None = None) -> None:
        self._runs = runs
        self._ref = ref
        self._deadline_s = deadline_s
        self._waiting = False
        self._checked_s = 0.0

    def __call__(self, reason: WaitReason | None) -> None:
        if reason is not None and not self._waiting:
            self._waiting = True
            metrics.model_budget_wait(reason)
            self._runs.note_waiting(self._ref, MODEL_BUDGET)
        elif reason is None and self._waiting:
            self.done()
        if reason is not None:
            self._stop_if_asked()

    def _stop_if_asked(self) -> None:
        now_s = time.monotonic()
        if self._deadline_s is not None and now_s >= self._deadline_s:
            raise RunTimeout(
                f"run {self._ref.run_id} reached its deadline waiting for model budget; raise "
                "its timeout_s, or the model's limits (TETHER_MODEL_LIMITS)"
            )
        if now_s - self._checked_s < STOP_CHECK_S:
            return
        self._checked_s = now_s
        mode = self._runs.stop_mode(self._ref)
        if mode is StopMode.INTERRUPT:
            raise RunInterrupted(
                f"run {self._ref.run_id} was interrupted while waiting for model budget, for a "
                "newer run of its session (on_busy='interrupt')"
            )
        if mode is not None:
            raise RunCancelled(
                f"run {self._ref.run_id} was cancelled while waiting for model budget"
            )

    def done(self) -> None:
        """The run stopped waiting (admitted, or it ended)."""
        if self._waiting:
            self._waiting = False
            self._runs.note_waiting(self._ref, None)
