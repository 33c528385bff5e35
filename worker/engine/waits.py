"""What the run being executed waits for, made visible: its record says "model budget" (so
``tether status``, the console and ``tether wait`` show it) while a model call waits for its
fleet-wide budget, and a metric counts the waits. Nothing is written for a run that never
waits."""

from __future__ import annotations

from tether.observability import metrics
from tether.runs.contract import RunRef
from tether.runs.limits.base import WaitReason
from tether.runs.queue.base import SessionQueue

MODEL_BUDGET = "model budget"


class WaitNotice:
    """The :data:`~tether.runs.limits.gate.budget_waits` hook of one run."""

    def __init__(self, runs: SessionQueue, ref: RunRef) -> None:
        self._runs = runs
        self._ref = ref
        self._waiting = False

    def __call__(self, reason: WaitReason | None) -> None:
        if reason is not None and not self._waiting:
            self._waiting = True
            metrics.model_budget_wait(reason)
            self._runs.note_waiting(self._ref, MODEL_BUDGET)
        elif reason is None and self._waiting:
            self.done()

    def done(self) -> None:
        """The run stopped waiting (admitted, or it ended)."""
        if self._waiting:
            self._waiting = False
            self._runs.note_waiting(self._ref, None)
