"""Agents whose model reports usage on every call, for the usage, cost and budget tests (workers
load them through TETHER_AGENT_MODULES). An input ``steps=N`` asks for N tool steps, then the
answer; every model call reports :data:`CALL`."""

from __future__ import annotations

import uuid

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.events import Usage
from tether.core.items import ToolOutput, UserMessage
from tether.models.base import ModelRequest

PRICED = "priced-model"
UNPRICED = "free-model"
CALL = Usage(
    input_tokens=1000, output_tokens=100, total_tokens=1100, cached_tokens=200, reasoning_tokens=50
)
#: USD per million tokens of PRICED: a call costs (800 * 1 + 200 * 0.5 + 100 * 4) / 1e6.
PRICE = {"input_usd_per_mtok": 1, "output_usd_per_mtok": 4, "cached_input_usd_per_mtok": 0.5}
PRICES = {PRICED: PRICE}
CALL_USD = 0.0013


@tool
def work(n: int) -> str:
    """One step of work."""
    return f"worked {n}"


def progress(request: ModelRequest) -> tuple[int, int]:
    """The tool steps the run's input ``steps=N`` asks for, and how many it has done."""
    items = request.items
    start = max(i for i, item in enumerate(items) if isinstance(item, UserMessage))
    first = items[start]
    assert isinstance(first, UserMessage)
    steps = int(first.content.partition("steps=")[2] or 0)
    return steps, sum(isinstance(item, ToolOutput) for item in items[start:])


def respond(request: ModelRequest) -> ModelResponse:
    """The next step (a ``work`` call) or the answer, each call reporting :data:`CALL`."""
    steps, done = progress(request)
    if done >= steps:
        return ModelResponse(text=f"done {done}", usage=CALL)
    call = ModelResponse.call(f"call_{uuid.uuid4().hex[:10]}", "work", {"n": done + 1})
    return ModelResponse(text=None, tool_calls=call.tool_calls, usage=CALL)


TETHER_AGENTS = {
    "spender": lambda: Agent(ScriptedModel(responder=respond), PRICED, tools=[work]),
    "unpriced": lambda: Agent(ScriptedModel(responder=respond), UNPRICED, tools=[work]),
}
