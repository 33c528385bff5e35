"""Agents for the replay and rerun tests (workers load them via TETHER_AGENT_MODULES).

``tally`` runs three tool steps, ``mark(n=1)``, ``mark(n=2)``, ``mark(n=3)``, then answers
``marked 3``. ``mark`` counts every execution of its idempotency key in Redis
(``COUNTER_REDIS_URL``, ``COUNTER_PREFIX``), per step: the effects the tests count; on a worker
the model counts its calls there too. The other factories are
"new versions" of ``tally`` for replay: ``tally_shifted`` decides another argument at each step,
``tally_renamed`` offers its tool under another name, ``tally_strict`` changed the tool's schema.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import redis

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput, UserMessage
from tether.models.base import ModelRequest
from tether.runtime.tools import Tool, ToolContext

STEPS = 3


def effects_key(prefix: str) -> str:
    """The Redis hash of executions per idempotency key."""
    return f"{prefix}:effects"


@tool
def mark(n: int, ctx: ToolContext) -> str:
    """One step of work with a side effect outside Tether."""
    client = redis.Redis.from_url(os.environ["COUNTER_REDIS_URL"])
    client.hincrby(
        effects_key(os.environ["COUNTER_PREFIX"]), f"{ctx.step}:{ctx.idempotency_key}", 1
    )
    return f"marked {n}"


@tool(name="stamp")
def stamp(n: int) -> str:
    """``mark`` under another name."""
    return f"marked {n}"


@tool(name="mark")
def strict_mark(n: str) -> str:
    """``mark`` whose argument became a string."""
    return f"marked {n}"


def _responder(shift: int, name: str) -> Callable[[ModelRequest], ModelResponse]:
    def respond(request: ModelRequest) -> ModelResponse:
        url = os.environ.get("COUNTER_REDIS_URL")
        if url:  # on a worker: count the model calls (a replay in the test process makes none)
            redis.Redis.from_url(url).incr(f"{os.environ['COUNTER_PREFIX']}:model_calls")
        items = request.items
        start = max(i for i, item in enumerate(items) if isinstance(item, UserMessage))
        done = sum(isinstance(item, ToolOutput) for item in items[start:])
        if done >= STEPS:
            return ModelResponse.final(f"marked {done}")
        return ModelResponse.call(f"call_{done + 1}", name, {"n": done + 1 + shift})

    return respond


def _tally(shift: int = 0, tools: tuple[Tool, ...] = (mark,), name: str = "mark") -> Agent:
    return Agent(
        ScriptedModel(responder=_responder(shift, name)),
        "scripted-tally",
        tools=tools,
        name="tally",
    )


def tally() -> Agent:
    """Three tool steps, then an answer."""
    return _tally()


def tally_shifted() -> Agent:
    """A new version deciding ``mark(n + 1)`` at each step."""
    return _tally(shift=1)


def tally_renamed() -> Agent:
    """A new version whose tool is called ``stamp``."""
    return _tally(tools=(stamp,), name="stamp")


def tally_strict() -> Agent:
    """A new version whose ``mark`` takes a string."""
    return _tally(tools=(strict_mark,))


TETHER_AGENTS = {"tally": tally}
