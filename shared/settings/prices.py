"""The price table setting: ``TETHER_MODEL_PRICES``, a JSON object (or ``@path`` to a JSON file)
from model name to its USD prices per million tokens, and what a usage costs at them.

>>> prices = ModelPrices.parse(
...     '{"gpt-4o-mini": {"input_usd_per_mtok": 0.15, "output_usd_per_mtok": 0.6}}'
... )
>>> prices.cost_usd("gpt-4o-mini", Usage(input_tokens=1000, output_tokens=100))
0.00021

A model the table does not name is *unpriced*: :meth:`ModelPrices.cost_usd` answers None, and
sums count it as 0 (and say how many runs were unpriced), never a guess. Summing the usage of a
session's events is :mod:`tether.models.prices`.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, Field

from tether.ids import validate_model_name
from tether.settings.json import JsonTable

#: The variable the prices come from, for messages.
VARIABLE = "TETHER_MODEL_PRICES"
_PER_MTOK = 1_000_000
#: A price above this per million tokens is a typo (USD per token given as per million).
_MAX_USD_PER_MTOK = 100_000.0


class TokenCounts(Protocol):
    """The tokens a price applies to (:class:`tether.core.events.Usage` is one); a protocol, so
    the settings do not import the event model."""

    @property
    def input_tokens(self) -> int:
        """Input tokens, the cached ones included."""

    @property
    def cached_tokens(self) -> int:
        """Input tokens read from the provider's prompt cache."""

    @property
    def output_tokens(self) -> int:
        """Output tokens, the reasoning ones included."""


class ModelPrice(BaseModel):
    """One model's prices, in USD per million tokens.

    Attributes:
        input_usd_per_mtok: uncached input (prompt) tokens.
        output_usd_per_mtok: output tokens (reasoning tokens are output tokens, priced alike).
        cached_input_usd_per_mtok: input tokens read from the provider's prompt cache; left
            out, they cost the input price.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_usd_per_mtok: float = Field(ge=0, le=_MAX_USD_PER_MTOK, allow_inf_nan=False)
    output_usd_per_mtok: float = Field(ge=0, le=_MAX_USD_PER_MTOK, allow_inf_nan=False)
    cached_input_usd_per_mtok: float | None = Field(
        default=None, ge=0, le=_MAX_USD_PER_MTOK, allow_inf_nan=False
    )

    def cost_usd(self, usage: TokenCounts) -> float:
        """What ``usage`` costs at these prices."""
        cached = min(usage.cached_tokens, usage.input_tokens)
        cached_price = self.cached_input_usd_per_mtok
        if cached_price is None:
            cached_price = self.input_usd_per_mtok
        per_mtok = (
            (usage.input_tokens - cached) * self.input_usd_per_mtok
            + cached * cached_price
            + usage.output_tokens * self.output_usd_per_mtok
        )
        return round(per_mtok / _PER_MTOK, 9)


class ModelPrices(JsonTable[ModelPrice]):
    """Prices by model name."""

    variable: ClassVar[str] = VARIABLE
    example: ClassVar[str] = (
        '{"gpt-4o-mini": {"input_usd_per_mtok": 0.15, "output_usd_per_mtok": 0.6}}'
    )

    @classmethod
    def check_name(cls, name: str) -> None:
        validate_model_name(name)

    def cost_usd(self, model: str | None, usage: TokenCounts) -> float | None:
        """What ``usage`` of ``model`` costs; None when the table has no price for it."""
        price = self.root.get(model) if model else None
        return None if price is None else price.cost_usd(usage)
