"""The tenant budgets setting: ``TETHER_TENANT_BUDGETS``, a JSON object (or ``@path`` to a JSON
file) from tenant to its budget; ``"*"`` is the budget of every tenant not named.

>>> TenantBudgets.parse('{"acme": {"usd_per_day": 50}, "*": {"runs_per_minute": 600}}')
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tether.errors import InvalidId
from tether.ids import validate_tenant
from tether.settings.json import JsonTable

#: The variable the budgets come from, for messages.
VARIABLE = "TETHER_TENANT_BUDGETS"
#: The entry that applies to every tenant not named.
DEFAULT_TENANT = "*"


class TenantBudget(BaseModel):
    """One tenant's budget; a limit left out (or 0) is no limit.

    Attributes:
        tokens_per_day: input + output tokens per UTC day, over every run of the tenant.
        usd_per_day: cost per UTC day, at ``TETHER_MODEL_PRICES`` (unpriced models cost 0).
        runs_per_minute: submissions admitted per minute (evenly spaced, no burst).
        max_wait_s: the longest a tool call of the tenant's runs may park on the fleet
            (``ctx.sleep``, the ``wait`` tool), when lower than ``TETHER_MAX_WAIT_S``; not a
            spend limit (it costs no Redis round trip).
        max_child_depth: how deep its child runs may nest (``ctx.spawn``), below
            ``TETHER_MAX_CHILD_DEPTH`` (None: that setting).
        max_children_per_run: how many children one of its runs may spawn, below
            ``TETHER_MAX_CHILDREN_PER_RUN`` (None: that setting).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens_per_day: int = Field(default=0, ge=0, le=10**15)
    usd_per_day: float = Field(default=0.0, ge=0, le=10**9, allow_inf_nan=False)
    runs_per_minute: int = Field(default=0, ge=0, le=10_000_000)
    max_wait_s: float = Field(default=0.0, ge=0, le=366 * 86_400, allow_inf_nan=False)
    max_child_depth: int | None = Field(default=None, ge=0, le=100)
    max_children_per_run: int | None = Field(default=None, ge=0, le=100_000)

    @field_validator("usd_per_day")
    @classmethod
    def _countable(cls, value: float) -> float:
        # counted in whole nano-USD: a smaller limit rounded to 0, which submissions read as no
        # limit while workers stopped every run at its first step
        if 0 < value < 1e-9:
            raise ValueError("must be 0 (no limit) or at least 1e-9 (one nano-USD)")
        return value

    @property
    def spend_limited(self) -> bool:
        """Whether tokens or cost per day are limited (what a run's step boundary checks)."""
        return bool(self.tokens_per_day or self.usd_per_day)

    @property
    def limited(self) -> bool:
        """Whether any limit is set (an unlimited tenant costs no Redis round trip)."""
        return self.spend_limited or bool(self.runs_per_minute)

    @property
    def us_per_run(self) -> int:
        """The runs GCRA's emission interval (0: unlimited)."""
        return 60_000_000 // self.runs_per_minute if self.runs_per_minute else 0


class TenantBudgets(JsonTable[TenantBudget]):
    """Budgets by tenant (``"*"``: every other tenant)."""

    variable: ClassVar[str] = VARIABLE
    example: ClassVar[str] = '{"acme": {"tokens_per_day": 1000000, "usd_per_day": 50}}'

    @classmethod
    def check_name(cls, name: str) -> None:
        if name == DEFAULT_TENANT:
            return
        try:
            validate_tenant(name)
        except InvalidId as exc:  # a ValueError: pydantic names where it is
            raise ValueError(str(exc)) from None

    def entry(self, tenant: str) -> TenantBudget | None:
        """The entry of ``tenant`` (its own, else ``"*"``), limited or not (its run limits
        such as ``max_child_depth`` are no spending budget)."""
        return self.root.get(tenant, self.root.get(DEFAULT_TENANT))

    def for_tenant(self, tenant: str) -> TenantBudget | None:
        """The budget of ``tenant`` (its own, else ``"*"``), or None when it has none."""
        found = self.root.get(tenant, self.root.get(DEFAULT_TENANT))
        return found if found is not None and found.limited else None

    def max_wait_s(self, tenant: str) -> float:
        """``tenant``'s longest wait (its own entry, else ``"*"``'s; 0: none of its own)."""
        found = self.root.get(tenant, self.root.get(DEFAULT_TENANT))
        return found.max_wait_s if found is not None else 0.0
