"""The model-budget seam: admit a model call under its model's fleet-wide limits and its tenant's
fair share of them, settle it with the tokens it really used, and pause a model for everyone
after a 429.

Members: :class:`~tether.runs.limits.memory.InMemoryModelBudget` (one process) and
:class:`~tether.runs.limits.redis.RedisModelBudget` (the fleet); both pass
``tests/test_model_budget_contract.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from tether.runs.limits.shares import DEFAULT_TENANT
from tether.settings.limits import ModelLimit

#: Why a call waits: a 429's pause, no free slot, the requests or tokens rate, or another
#: tenant's turn in the fair share (:mod:`~tether.runs.limits.shares`).
WaitReason = Literal["paused", "concurrency", "requests", "tokens", "share"]


@dataclass(frozen=True)
class Admission:
    """A budget's answer: admitted, or how long to wait and why."""

    admitted: bool
    wait_s: float = 0.0
    reason: WaitReason | None = None


@runtime_checkable
class ModelBudget(Protocol):
    """Fleet-wide admission of model calls."""

    def admit(
        self,
        model: str,
        limit: ModelLimit,
        token: str,
        tokens: int,
        *,
        tenant: str = DEFAULT_TENANT,
    ) -> Admission:
        """Admit one call of ``tenant`` to ``model`` estimated at ``tokens`` tokens, holding a
        concurrency slot under ``token`` (unique per call) until :meth:`settle`; or say how
        long to wait. A refused call counts as waiting for its tenant's fair share until it
        is admitted (or stops asking)."""

    def leaves_to_others(self, model: str, limit: ModelLimit, tenant: str) -> bool:
        """True when ``tenant`` should leave a free worker to another tenant rather than start
        one more run calling ``model``: ``tenant`` already has a call waiting to take its next
        turn, and another tenant that goes before it has a call waiting or had one admitted
        moments ago (within the waiting grace: its next run is on its way to a worker)
        (:mod:`~tether.runs.limits.shares`). Changes nothing."""

    def settle(self, model: str, limit: ModelLimit, token: str, token_delta: int) -> None:
        """The call ``token`` ended: free its slot, and charge (or credit) the tokens it used
        beyond (or under) its estimate."""

    def pause(self, model: str, seconds: float) -> None:
        """Admit no call of ``model`` for ``seconds`` (a provider's 429 ``Retry-After``)."""
