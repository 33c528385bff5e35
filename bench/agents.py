"""Agents registered for the benchmarks (``TETHER_AGENT_MODULES=bench.agents``).

``priced-echo`` is the ``echo`` demo agent whose model reports usage on every call (model
:data:`PRICED_MODEL`), for the round trips of usage counting and budgets.
``notes-compact`` is the ``notes`` demo agent with a compaction policy: once memory holds more
than :data:`TRIGGER_ITEMS` items it is projected down to :data:`KEEP_ITEMS` (the first
:data:`PINNED_ITEMS` pinned) plus a structured summary, so a long session's memory, and hence its
head, stays bounded while its event log keeps growing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tether.core.context import ContextBudget
from tether.core.items import ToolOutput, UserMessage
from tether.models.base import ModelRequest as _Request
from tether.models.base import ModelResponse
from tether.models.scripted import ScriptedModel
from tether.runtime.agent import Agent
from tether.runtime.compaction import StructuredSummaryPolicy
from tether.runtime.demo_agents import notes_agent
from tether.runtime.tools import ToolContext, Waiting, tool

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


@tool
def nap(seconds: float, ctx: ToolContext) -> Waiting:
    """Sleep for `seconds` without holding a worker."""
    return ctx.sleep(seconds)


def _nap_or_answer(request: _Request) -> ModelResponse:
    last = request.items[-1] if request.items else None
    if isinstance(last, ToolOutput):
        return ModelResponse.final(f"woke: {last.output}")
    words = last.content.split() if isinstance(last, UserMessage) else []
    return ModelResponse.call("call_1", "nap", {"seconds": float(words[-1]) if words else 1.0})


def sleeper_agent() -> Agent:
    """``nap N``: one tool call that sleeps N seconds on the fleet (P15, P16)."""
    return Agent(ScriptedModel(responder=_nap_or_answer), "scripted", tools=[nap], name="sleeper")


@tool
def listen(name: str, ctx: ToolContext) -> Waiting | str:
    """Wait up to an hour for signal `name` without holding a worker."""
    return ctx.wait_for_signal(name, 3600)


def _listen_or_answer(request: _Request) -> ModelResponse:
    last = request.items[-1] if request.items else None
    if isinstance(last, ToolOutput):
        return ModelResponse.final(f"heard: {last.output}")
    words = last.content.split() if isinstance(last, UserMessage) else []
    return ModelResponse.call("call_1", "listen", {"name": words[-1] if words else "go"})


def listener_agent() -> Agent:
    """``listen NAME``: one tool call that waits for signal NAME on the fleet (P15)."""
    return Agent(
        ScriptedModel(responder=_listen_or_answer), "scripted", tools=[listen], name="listener"
    )


TETHER_AGENTS: dict[str, Callable[[], Agent]] = {
    "notes-compact": notes_compact_agent,
    "sleeper": sleeper_agent,
    "listener": listener_agent,
}


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

    return Agent(
        ScriptedModel(responder=respond, keep_requests=0),
        "scripted-steps10",
        tools=[tick],
        name="steps10",
    )


TETHER_AGENTS["steps10"] = lambda: _steps10(0.0)
TETHER_AGENTS["steps10-slow"] = lambda: _steps10(0.3)


# --- P10: live token streaming ------------------------------------------------------------------

#: The answer of the ``p10-answer`` agent's final step (one streamed piece per word).
P10_ANSWER = " ".join(f"word{n}" for n in range(300))


def _p10_stamped() -> Agent:
    """Streams pieces stamped with ``time.time_ns()`` when handed to the sink: input
    ``"<count> <interval_s>"`` (an interval of 0: as fast as the model's loop goes)."""
    import time

    from tether import ModelResponse, ScriptedModel
    from tether.core.items import UserMessage
    from tether.models.base import DeltaSink, ModelDelta, ModelRequest

    class Stamped(ScriptedModel):
        def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
            text = next(i.content for i in request.items if isinstance(i, UserMessage))
            count, interval_s = text.split()
            pause_s = float(interval_s)
            sent = []
            for _ in range(int(count)):
                piece = f"{time.time_ns()} "
                on_delta(ModelDelta("text", piece))
                sent.append(piece)
                if pause_s:
                    time.sleep(pause_s)
            return ModelResponse.final("".join(sent))

    return Agent(Stamped(default_text="unstreamed"), "scripted-stamped", name="p10-stamped")


def _p10_answer() -> Agent:
    """Two steps: a tool call, then :data:`P10_ANSWER` (streamed word by word when the worker
    streams; the same run unstreamed on a worker with ``TETHER_DELTA_MAX_LEN=0``)."""
    from tether import ModelResponse, ScriptedModel, tool
    from tether.core.items import ToolOutput
    from tether.models.base import ModelRequest

    @tool
    def fetch(topic: str) -> str:
        """Fetch notes on a topic."""
        return f"notes on {topic}"

    def respond(request: ModelRequest) -> ModelResponse:
        if isinstance(request.items[-1], ToolOutput):
            return ModelResponse.final(P10_ANSWER)
        return ModelResponse.call("call_fetch", "fetch", {"topic": "streams"}, text="fetching")

    return Agent(
        ScriptedModel(responder=respond, keep_requests=0),
        "scripted-answer",
        tools=[fetch],
        name="p10",
    )


TETHER_AGENTS["p10-stamped"] = _p10_stamped
TETHER_AGENTS["p10-answer"] = _p10_answer


PRICED_MODEL = "bench-priced"


def priced_echo_agent() -> Agent:
    """An echo whose every model call reports 1,100 tokens."""
    from tether import ModelResponse, ScriptedModel
    from tether.core.events import Usage
    from tether.models.base import ModelRequest

    call = Usage(input_tokens=1000, output_tokens=100, total_tokens=1100, cached_tokens=200)

    def respond(request: ModelRequest) -> ModelResponse:
        return ModelResponse.final(f"echo: {len(request.items)}", usage=call)

    return Agent(
        ScriptedModel(responder=respond, keep_requests=0), PRICED_MODEL, name="priced-echo"
    )


TETHER_AGENTS["priced-echo"] = priced_echo_agent
