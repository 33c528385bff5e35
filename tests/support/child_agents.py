"""Agents that spawn child runs and wait on them (loaded by workers and tests).

- ``parent``: input ``"fan <n> [any] [timeout <s>] [detached] [agent <name>] [session <id>]
  [input <text>]"``: its ``fan_out`` tool spawns ``n`` children of ``agent`` (default
  ``child``; in session ``id`` when given) with the inputs ``input`` (default ``topic-<i>``) and
  waits on them (``mode any`` with ``any``); the model then answers ``children: <its output>``.
- ``child``: answers ``answer: <input>``; ``fail ...`` fails the run (a model error); ``nap N``
  sleeps N seconds on a timer first.
"""

from __future__ import annotations

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput, UserMessage
from tether.errors import ModelError
from tether.models.base import ModelRequest
from tether.runtime.tools import ToolContext, Waiting


@tool
def fan_out(
    n: int,
    mode: str,
    timeout_s: float,
    detached: bool,
    agent: str,
    inputs: list[str],
    session: str,
    ctx: ToolContext,
) -> Waiting:
    """Spawn `n` children and wait on them."""
    refs = [
        ctx.spawn(
            agent,
            inputs[i] if i < len(inputs) else f"topic-{i}",
            session_id=session or None,
            detached=detached,
        )
        for i in range(n)
    ]
    return ctx.wait(refs, mode="any" if mode == "any" else "all", timeout_s=timeout_s or None)


@tool
def nap(seconds: float, ctx: ToolContext) -> Waiting:
    """Sleep for `seconds` without holding a worker."""
    return ctx.sleep(seconds)


def _fan_arguments(text: str) -> dict[str, object]:
    words = text.split()
    n = int(words[1]) if len(words) > 1 else 1
    arguments: dict[str, object] = {
        "n": n,
        "mode": "any" if "any" in words else "all",
        "timeout_s": float(words[words.index("timeout") + 1]) if "timeout" in words else 0.0,
        "detached": "detached" in words,
        "agent": words[words.index("agent") + 1] if "agent" in words else "child",
        "inputs": [],
        "session": words[words.index("session") + 1] if "session" in words else "",
    }
    if "input" in words:
        arguments["inputs"] = [" ".join(words[words.index("input") + 1 :])] * n
    return arguments


def _parent(request: ModelRequest) -> ModelResponse:
    last = request.items[-1] if request.items else None
    if isinstance(last, ToolOutput):
        return ModelResponse.final(f"children: {last.output}")
    text = last.content if isinstance(last, UserMessage) else ""
    return ModelResponse.call(f"call_{len(request.items)}", "fan_out", _fan_arguments(text))


def _child(request: ModelRequest) -> ModelResponse:
    last = request.items[-1] if request.items else None
    if isinstance(last, ToolOutput):
        return ModelResponse.final(f"woke: {last.output[:40]}")
    text = last.content if isinstance(last, UserMessage) else ""
    if text.startswith("fail"):
        raise ModelError(f"the child was told to fail: {text}")
    if text.startswith("nap"):
        return ModelResponse.call(
            f"call_{len(request.items)}", "nap", {"seconds": float(text.split()[1])}
        )
    return ModelResponse.final(f"answer: {text}")


def parent_agent() -> Agent:
    """Spawns children and waits on them (see the module doc)."""
    return Agent(ScriptedModel(responder=_parent), "scripted", tools=[fan_out], name="parent")


def child_agent() -> Agent:
    """Answers its input; ``fail ...`` fails; ``nap N`` sleeps first."""
    return Agent(ScriptedModel(responder=_child), "scripted", tools=[nap], name="child")


TETHER_AGENTS = {"parent": parent_agent, "child": child_agent}
