"""Agents registered for the benchmarks (``TETHER_AGENT_MODULES=bench.agents``).

``notes-compact`` is the ``notes`` demo agent with a compaction policy: once memory holds more
than :data:`TRIGGER_ITEMS` items it is projected down to :data:`KEEP_ITEMS` (the first
:data:`PINNED_ITEMS` pinned) plus a structured summary, so a long session's memory, and hence its
head, stays bounded while its event log keeps growing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tether.core.context import ContextBudget
from tether.runtime.agent import Agent
from tether.runtime.compaction import StructuredSummaryPolicy
from tether.runtime.demo_agents import notes_agent

KEEP_ITEMS = 40
TRIGGER_ITEMS = 60
PINNED_ITEMS = 2


def notes_compact_agent() -> Agent:
    """The ``notes`` demo agent plus a :class:`StructuredSummaryPolicy`."""
    agent = notes_agent()
    policy = StructuredSummaryPolicy(
        ContextBudget(max_items=KEEP_ITEMS, pinned_prefix_items=PINNED_ITEMS),
        trigger_items=TRIGGER_ITEMS,
    )
    agent.options = replace(agent.options, compact_policy=policy)
    agent.name = "notes-compact"
    return agent


TETHER_AGENTS: dict[str, Callable[[], Agent]] = {"notes-compact": notes_compact_agent}


STEPS10_ANSWER = "ten steps"


def _steps10(delay_s: float) -> Agent:
    """Ten tool steps (one ``tick`` each, ``delay_s`` long), then an answer."""
    import time

    from tether import ModelResponse, ScriptedModel, tool
    from tether.core.items import ToolOutput, UserMessage
    from tether.models.base import ModelRequest

    @tool
    def tick(n: int) -> str:
        """One step of work."""
        if delay_s:
            time.sleep(delay_s)
        return f"tick {n}"

    def respond(request: ModelRequest) -> ModelResponse:
        items = request.items
        last_input = max(i for i, item in enumerate(items) if isinstance(item, UserMessage))
        done = sum(isinstance(item, ToolOutput) for item in items[last_input:])
        if done >= 10:
            return ModelResponse.final(STEPS10_ANSWER)
        return ModelResponse.call(f"call_{len(items)}", "tick", {"n": done + 1})

    return Agent(ScriptedModel(responder=respond), "scripted-steps10", tools=[tick], name="steps10")


TETHER_AGENTS["steps10"] = lambda: _steps10(0.0)
TETHER_AGENTS["steps10-slow"] = lambda: _steps10(0.3)
