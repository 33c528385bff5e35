"""Agents that park on timers (loaded by workers and tests): ``sleeper`` sleeps from a tool
(``ctx.sleep``), ``waiter`` has the model call the opt-in ``wait`` tool."""

from __future__ import annotations

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput, UserMessage
from tether.models.base import ModelRequest
from tether.runtime.tools import ToolContext, Waiting
from tether.runtime.waiting import wait_tool


@tool
def nap(seconds: float, ctx: ToolContext) -> Waiting:
    """Sleep for `seconds` without holding a worker."""
    return ctx.sleep(seconds)


def _respond_with(tool_name: str):  # type: ignore[no-untyped-def]
    def respond(request: ModelRequest) -> ModelResponse:
        last = request.items[-1] if request.items else None
        if isinstance(last, ToolOutput):
            return ModelResponse.final(f"woke: {last.output}")
        text = last.content if isinstance(last, UserMessage) else ""
        words = text.split()
        seconds = float(words[-1]) if words else 1.0
        arguments: dict[str, object] = {"seconds": seconds}
        if tool_name == "wait":
            arguments["reason"] = "check again later"
        return ModelResponse.call(f"call_{len(request.items)}", tool_name, arguments)

    return respond


def sleeper_agent() -> Agent:
    """``nap N``: a tool sleeps N seconds, then the model answers ``woke: {...}``."""
    return Agent(
        ScriptedModel(responder=_respond_with("nap")), "scripted", tools=[nap], name="sleeper"
    )


def waiter_agent() -> Agent:
    """``wait N``: the model calls the built-in ``wait`` tool for N seconds."""
    return Agent(
        ScriptedModel(responder=_respond_with("wait")),
        "scripted",
        tools=[wait_tool()],
        name="waiter",
    )


TETHER_AGENTS = {"sleeper": sleeper_agent, "waiter": waiter_agent}
