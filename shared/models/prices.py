"""The price table: ``TETHER_MODEL_PRICES``, a JSON object (or ``@path`` to a JSON file) from
model name to its USD prices per million tokens, and :func:`cost_usd`, which prices a usage.

>>> prices = ModelPrices.parse(
...     '{"gpt-4o-mini": {"input_usd_per_mtok": 0.15, "output_usd_per_mtok": 0.6}}'
... )
>>> prices.cost_usd("gpt-4o-mini", Usage(input_tokens=1000, output_tokens=100))
0.00021

A model the table does not name is *unpriced*: :meth:`ModelPrices.cost_usd` answers None, and
sums count it as 0 (and say how many runs were unpriced), never a guess.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from tether.core.events import (
    AgentEvent,
    EventType,
    ModelRequestPayload,
    ModelResponsePayload,
    ModelUsagePayload,
)
from tether.core.events import Usage as Usage
from tether.ids import validate_model_name
from tether.settings.json import JsonTable

#: The variable the prices come from, for messages.
VARIABLE = "TETHER_MODEL_PRICES"
_PER_MTOK = 1_000_000
#: A price above this per million tokens is a typo (USD per token given as per million).
_MAX_USD_PER_MTOK = 100_000.0


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

    def cost_usd(self, usage: Usage) -> float:
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

    def cost_usd(self, model: str | None, usage: Usage) -> float | None:
        """What ``usage`` of ``model`` costs; None when the table has no price for it."""
        price = self.root.get(model) if model else None
        return None if price is None else price.cost_usd(usage)


def cost_usd(prices: ModelPrices, model: str | None, usage: Usage) -> float | None:
    """What ``usage`` of ``model`` costs at ``prices`` (None: unpriced)."""
    return prices.cost_usd(model, usage)


def usage_by_model(events: Iterable[AgentEvent]) -> dict[str, Usage]:
    """The tokens of each model's calls in ``events``: each ``MODEL_RESPONSE`` counts for the
    model of the ``MODEL_REQUEST`` before it (a response without one counts for ""), and each
    ``MODEL_USAGE`` (a billed call without a response: a compaction's summary call, an answer
    the client could not use) for the model it names."""
    out: dict[str, Usage] = {}
    model = ""
    for event in events:
        payload = event.payload
        if event.type is EventType.MODEL_REQUEST and isinstance(payload, ModelRequestPayload):
            model = payload.model
        elif event.type is EventType.MODEL_RESPONSE and isinstance(payload, ModelResponsePayload):
            out[model] = out.get(model, Usage()) + payload.usage
        elif event.type is EventType.MODEL_USAGE and isinstance(payload, ModelUsagePayload):
            out[payload.model] = out.get(payload.model, Usage()) + payload.usage
    return out


@dataclass(frozen=True)
class Spend:
    """Tokens and cost summed over models (a session's, a batch's)."""

    usage: Usage
    cost_usd: float
    """The cost of the priced models' tokens."""
    unpriced_tokens: int = 0
    """Input + output tokens of models without a price (not in ``cost_usd``)."""

    @property
    def tokens(self) -> int:
        """Input + output tokens."""
        return self.usage.input_tokens + self.usage.output_tokens


def spend_of(prices: ModelPrices, by_model: Mapping[str, Usage]) -> Spend:
    """The tokens and cost of ``by_model`` (from :func:`usage_by_model`) at ``prices``."""
    total, cost, unpriced = Usage(), 0.0, 0
    for model, usage in by_model.items():
        total = total + usage
        priced = prices.cost_usd(model, usage)
        if priced is None:
            unpriced += usage.input_tokens + usage.output_tokens
        else:
            cost += priced
    return Spend(total, round(cost, 9), unpriced)
