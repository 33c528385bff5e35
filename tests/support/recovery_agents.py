"""An agent that sleeps until a set moment (loaded by workers and tests): ``alarm``, input
``until <epoch ms>``: its tool parks on a timer due then (``ctx.sleep_until``), and the model
answers ``woke: <output>``. Many runs given the same moment come due together, whenever each
was submitted (tests/test_waits_fleet_recovery.py: flushed or rolled back while they wait)."""

from __future__ import annotations

import datetime

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput, UserMessage
from tether.models.base import ModelRequest
from tether.runtime.tools import ToolContext, Waiting


@tool
def alarm_at(at_ms: int, ctx: ToolContext) -> Waiting:
    """Sleep until `at_ms` (ms since the epoch) without holding a worker."""
    when = datetime.datetime.fromtimestamp(at_ms / 1000, tz=datetime.UTC)
    return ctx.sleep_until(when)


def _respond(request: ModelRequest) -> ModelResponse:
    last = request.items[-1] if request.items else None
    if isinstance(last, ToolOutput):
        return ModelResponse.final(f"woke: {last.output}")
    text = last.content if isinstance(last, UserMessage) else ""
    return ModelResponse.call(
        f"call_{len(request.items)}", "alarm_at", {"at_ms": int(text.split()[-1])}
    )


def alarm_agent() -> Agent:
    """``until <epoch ms>``: a tool sleeps until then, then the model answers ``woke: {...}``."""
    return Agent(ScriptedModel(responder=_respond), "scripted", tools=[alarm_at], name="alarm")


TETHER_AGENTS = {"alarm": alarm_agent}
