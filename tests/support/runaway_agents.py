"""Agents whose tool holds the CPU and the GIL (#18 hole 6); loaded by workers through
TETHER_AGENT_MODULES, used in-process too.

``burn <exponent>`` computes ``7 ** exponent`` in one big-integer power: a single C call that never
releases the GIL, so nothing else in its process runs meanwhile (the lease keeper thread included).
``burner`` runs it in the worker's process; ``burner-isolated`` declares the tool isolated with a
1 s limit, so it runs in a child process that is killed at the limit.
"""

from __future__ import annotations

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput, UserMessage
from tether.models.base import ModelRequest
from tether.runtime.tools import Tool

ISOLATED_LIMIT_S = 1.0


def _burn(exponent: int) -> str:
    value = pow(7, exponent)  # one C call: holds the GIL throughout
    return f"burned: {value.bit_length()} bits"


burn = tool(name="burn", description="Compute 7**exponent (slow on purpose).")(_burn)
burn_isolated = tool(
    name="burn",
    description="Compute 7**exponent in a child process.",
    isolated=True,
    timeout_s=ISOLATED_LIMIT_S,
)(_burn)


def _responder(request: ModelRequest) -> ModelResponse:
    last = request.items[-1] if request.items else None
    if isinstance(last, ToolOutput):
        return ModelResponse.final(last.output)
    text = next(i.content for i in reversed(request.items) if isinstance(i, UserMessage))
    exponent = int(text.split()[1])
    return ModelResponse.call(f"call_{len(request.items)}", "burn", {"exponent": exponent})


def _agent(name: str, burn_tool: Tool) -> Agent:
    model = ScriptedModel(responder=_responder)
    return Agent(model, "scripted-burner", tools=[burn_tool], name=name)


def burner() -> Agent:
    """Burns in the worker's own process."""
    return _agent("burner", burn)


def burner_isolated() -> Agent:
    """Burns in an isolated child process, killed after 1 s."""
    return _agent("burner-isolated", burn_isolated)


TETHER_AGENTS = {"burner": burner, "burner-isolated": burner_isolated}
