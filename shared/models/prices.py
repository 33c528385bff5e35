"""What a session's model calls cost: the tokens of each model in its events
(:func:`usage_by_model`) and their sum priced at the table of ``TETHER_MODEL_PRICES``
(:func:`spend_of`, the table itself being :class:`tether.settings.prices.ModelPrices`).

A model the table does not name is *unpriced*: its tokens count, its cost is not guessed
(:attr:`Spend.unpriced_tokens`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tether.core.events import (
    AgentEvent,
    EventType,
    ModelRequestPayload,
    ModelResponsePayload,
    ModelUsagePayload,
    Usage,
)
from tether.settings.prices import ModelPrices


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
