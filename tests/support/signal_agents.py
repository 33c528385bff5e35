"""Agents that wait for signals (loaded by workers and tests): ``listener`` waits from a tool
(``ctx.wait_for_signal``), ``signal_waiter`` has the model call the opt-in ``wait_for_signal``
tool. Input ``listen NAME TIMEOUT_S [COUNT]``: wait COUNT times (default 1) in turn, then answer
``got: <output 1> | <output 2> ...`` (with a last word ``boom``: the model fails then)."""

from __future__ import annotations

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput, UserMessage
from tether.models.base import ModelRequest
from tether.runtime.tools import ToolContext, Waiting
from tether.runtime.waiting import signal_tool


@tool
def await_signal(name: str, timeout_s: float, ctx: ToolContext) -> Waiting | str:
    """Wait for the signal `name` for at most `timeout_s` seconds."""
    return ctx.wait_for_signal(name, timeout_s)


def respond_with(tool_name: str):  # type: ignore[no-untyped-def]
    def respond(request: ModelRequest) -> ModelResponse:
        asks = [i for i in request.items if isinstance(i, UserMessage)]
        words = asks[-1].content.split() if asks else []
        name, timeout_s = words[1], float(words[2])
        count = int(words[3]) if len(words) > 3 else 1
        start = max(n for n, i in enumerate(request.items) if isinstance(i, UserMessage))
        outputs = [i.output for i in request.items[start:] if isinstance(i, ToolOutput)]
        if len(outputs) >= count:
            if "boom" in words:  # the model fails after the signal was taken: rolled back
                raise RuntimeError("the model broke")
            return ModelResponse.final("got: " + " | ".join(outputs))
        key = "name" if tool_name == "await_signal" else "signal"
        arguments: dict[str, object] = {key: name, "timeout_s": timeout_s}
        return ModelResponse.call(f"call_{len(request.items)}", tool_name, arguments)

    return respond


def listener_agent() -> Agent:
    """``listen NAME TIMEOUT_S [COUNT]``: a tool waits for signal NAME, COUNT times."""
    return Agent(
        ScriptedModel(responder=respond_with("await_signal")),
        "scripted",
        tools=[await_signal],
        name="listener",
    )


def signal_waiter_agent() -> Agent:
    """The same, the model calling the built-in ``wait_for_signal`` tool."""
    return Agent(
        ScriptedModel(responder=respond_with("wait_for_signal")),
        "scripted",
        tools=[signal_tool()],
        name="signal_waiter",
    )


TETHER_AGENTS = {"listener": listener_agent, "signal_waiter": signal_waiter_agent}
