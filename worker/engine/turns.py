"""Leaving a free worker to another tenant's run: before a run starts on a model whose
fleet-wide limit several tenants share, the drain asks the limit's fair share
(:meth:`~tether.runs.limits.base.ModelBudget.leaves_to_others`) whether another tenant is owed
the model's next turn while this run's tenant already has a call waiting for its own. Then the
run goes back to its queue unstarted (its attempt uncounted) and its session is handed over:
the worker takes its next message, so a tenant whose runs hold every worker waiting for the
model cannot keep the owed tenant's runs from reaching one.

A session this process put back moments ago starts when it comes back
(:data:`DEFER_AGAIN_AFTER_S`): with a short queue its message returns at once, and putting it
back again would only spin.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tether.runs.limits.base import ModelBudget
from tether.settings.limits import ModelLimits

#: A session put back less than this long ago (s) starts when it comes back.
DEFER_AGAIN_AFTER_S = 1.0
#: Forget the sessions put back longer ago than this (s), once the book holds many.
_FORGET_AFTER_S = 60.0
_BOOK_SIZE = 1024


class ModelTurns:
    """Whether a run should leave its worker to another tenant's (one per worker process).

    Args:
        budget: the fleet's model budget.
        limits: the configured limits (a model without one is never put back).
        clock: seconds, monotonic (injectable for tests).
    """

    def __init__(
        self,
        budget: ModelBudget,
        limits: ModelLimits,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._budget = budget
        self._limits = limits
        self._clock = clock
        self._put_back: dict[tuple[str, str], float] = {}

    def leave(self, tenant: str, session_id: str, model: str) -> bool:
        """True when the run of ``tenant``/``session_id`` about to call ``model`` should go
        back to its queue (noted, so that it starts when it comes back within
        :data:`DEFER_AGAIN_AFTER_S`)."""
        limit = self._limits.for_model(model)
        if limit is None:
            return False
        now, key = self._clock(), (tenant, session_id)
        last = self._put_back.get(key)
        if last is not None and now - last < DEFER_AGAIN_AFTER_S:
            return False
        if not self._budget.leaves_to_others(model, limit, tenant):
            return False
        if len(self._put_back) >= _BOOK_SIZE:
            self._put_back = {k: t for k, t in self._put_back.items() if now - t < _FORGET_AFTER_S}
        self._put_back[key] = now
        return True
