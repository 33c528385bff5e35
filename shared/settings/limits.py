"""The model limits setting: ``TETHER_MODEL_LIMITS``, a JSON object (or ``@path`` to a JSON file)
from model name to its limits, validated once at start-up. Plain data: the gate that enforces
them is :mod:`tether.runs.limits`.

>>> ModelLimits.parse('{"gpt-4o-mini": {"requests_per_minute": 300, "concurrent_requests": 8}}')

Each limit is shared fairly between the tenants whose calls wait for it (``tenant_weights``,
every tenant 1 by default): see :mod:`tether.runs.limits.shares`.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tether.errors import InvalidId
from tether.ids import validate_model_name, validate_tenant
from tether.settings.json import JsonTable

#: The variable the limits come from, for messages.
VARIABLE = "TETHER_MODEL_LIMITS"


class ModelLimit(BaseModel):
    """One model's fleet-wide limits; a limit left out (or 0) is no limit.

    Attributes:
        requests_per_minute: calls admitted per minute, over every worker.
        tokens_per_minute: input + output tokens per minute (a call is admitted on an estimate
            of its tokens and settled with what it really used).
        concurrent_requests: calls in flight at once, over every worker.
        tenant_weights: each tenant's weight in the fair share of this limit (a tenant not
            named weighs 1): while several tenants' calls wait, each is admitted in
            proportion to its weight; a tenant alone may use the whole limit.
        idle_credit_s: how far ahead of the busiest tenant a tenant coming back from idle
            may start, in seconds of the whole limit (a light tenant's few calls go first
            instead of waiting their turn behind a burst; 0: strict turns).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests_per_minute: int = Field(default=0, ge=0, le=10_000_000)
    tokens_per_minute: int = Field(default=0, ge=0, le=10_000_000_000)
    concurrent_requests: int = Field(default=0, ge=0, le=100_000)
    tenant_weights: dict[str, float] = Field(default_factory=dict)
    idle_credit_s: float = Field(default=2.0, ge=0, le=3600)

    @field_validator("tenant_weights")
    @classmethod
    def _weights(cls, weights: dict[str, float]) -> dict[str, float]:
        for tenant, weight in weights.items():
            try:
                validate_tenant(tenant)
            except InvalidId as exc:  # as a ValueError: the message names the variable
                raise ValueError(str(exc)) from None
            if not 0.001 <= weight <= 1000:
                raise ValueError(
                    f"tenant {tenant!r} has weight {weight}; give a weight from 0.001 to 1000 "
                    "(1 is every other tenant's)"
                )
        return weights

    def weight(self, tenant: str) -> float:
        """``tenant``'s weight in the fair share of this limit (1 unless named)."""
        return self.tenant_weights.get(tenant, 1.0)

    @property
    def us_per_request(self) -> int:
        """The requests GCRA's emission interval (0: unlimited)."""
        return 60_000_000 // self.requests_per_minute if self.requests_per_minute else 0

    @property
    def us_per_token(self) -> float:
        """The tokens GCRA's emission interval, per token (0: unlimited)."""
        return 60_000_000 / self.tokens_per_minute if self.tokens_per_minute else 0.0

    @property
    def limited(self) -> bool:
        """Whether any limit is set (an unlimited model costs no Redis round trip)."""
        return bool(self.requests_per_minute or self.tokens_per_minute or self.concurrent_requests)


class ModelLimits(JsonTable[ModelLimit]):
    """Limits by model name."""

    variable: ClassVar[str] = VARIABLE
    example: ClassVar[str] = '{"gpt-4o-mini": {"requests_per_minute": 300}}'

    @classmethod
    def check_name(cls, name: str) -> None:
        validate_model_name(name)

    def for_model(self, model: str) -> ModelLimit | None:
        """The limits of ``model``, or None when it has none."""
        found = self.root.get(model)
        return found if found is not None and found.limited else None
