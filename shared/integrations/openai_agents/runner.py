"""An OpenAI Agents SDK agent as a Tether agent: Celery workers run it unchanged.

In a module named by ``TETHER_AGENT_MODULES``::

    from agents import Agent
    from tether.integrations.openai_agents import tether_agents

    support = Agent(name="support", instructions="...", tools=[lookup_order])
    TETHER_AGENTS = tether_agents(support)          # registered as "support"

then ``producer.run("s-1", "where is my order?", agent="support")`` runs it on a worker, with
Tether's lease, exactly-once commit, live events and stored history.

How: the Tether agent's model is :class:`SdkRunnerModel`. A Tether run writes the input as a
user message, then asks its model once; that call gives the session's memory to the SDK's
``Runner.run`` as its input list, and the SDK runs its whole loop (model turns, tool calls,
handoffs, guardrails). The items the SDK produced are appended to memory in one event and its
final output is the run's output. The SDK run is therefore one Tether step: a worker that dies
during it redoes the SDK run (``durability="step"`` cannot checkpoint inside it).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from tether.core.events import Usage
from tether.errors import ModelError
from tether.integrations.openai_agents.items import from_memory, to_memory
from tether.models.base import ModelRequest, ModelResponse, with_billed_usage
from tether.runtime.agent import Agent
from tether.runtime.options import AgentOptions

if TYPE_CHECKING:
    from agents import Agent as SdkAgent
    from agents import RunConfig

T = TypeVar("T")

DEFAULT_MAX_TURNS = 10
"""The SDK's own default: model turns of one SDK run before it gives up."""


_loop_lock = threading.Lock()
_loop: tuple[int, asyncio.AbstractEventLoop] | None = None


def _process_loop() -> asyncio.AbstractEventLoop:
    """This process's one event loop for SDK runs, running in a daemon thread (made again in a
    forked child: a prefork worker's loop thread does not survive the fork)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop[0] != os.getpid() or _loop[1].is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="tether-sdk-loop", daemon=True).start()
            _loop = (os.getpid(), loop)
        return _loop[1]


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from blocking code (also from a thread that runs a loop of
    its own), on this process's one SDK event loop.

    One loop for every run, not a fresh ``asyncio.run`` each: an SDK agent's model keeps its
    ``AsyncOpenAI`` client, whose pooled connections belong to the loop they were opened on;
    closing that loop after each run made every second run on a worker fail with "Event loop
    is closed" (after its request had reached the provider)."""
    return asyncio.run_coroutine_threadsafe(coro, _process_loop()).result()


def _usage(usage: Any) -> Usage:
    """The SDK's usage of a run as Tether's (counts it does not give read as none)."""

    def count(name: str) -> int:
        value = getattr(usage, name, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    into, out = count("input_tokens"), count("output_tokens")
    return Usage(
        input_tokens=into, output_tokens=out, total_tokens=count("total_tokens") or into + out
    )


def _final_text(output: Any) -> str:
    if output is None:
        return ""
    if isinstance(output, str):
        return output
    dump = getattr(output, "model_dump_json", None)
    return str(dump()) if callable(dump) else str(output)


class SdkRunnerModel:
    """A Tether model client whose every call is one ``Runner.run`` of an SDK agent.

    Args:
        agent: the SDK agent.
        max_turns: model turns of one SDK run.
        run_config: the SDK ``RunConfig`` of every run (model provider, tracing...).
    """

    def __init__(
        self,
        agent: SdkAgent[Any],
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        run_config: RunConfig | None = None,
    ) -> None:
        self.agent = agent
        self.max_turns = max_turns
        self.run_config = run_config

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Run the SDK agent on the conversation in ``request.items``."""
        from agents import Runner

        history: list[Any] = [sdk for item in request.items for sdk in from_memory(item)]
        try:
            result = run_coroutine(
                Runner.run(
                    self.agent, history, max_turns=self.max_turns, run_config=self.run_config
                )
            )
        except Exception as exc:
            failure = ModelError(
                f"the OpenAI Agents SDK run of agent {self.agent.name!r} failed: "
                f"{type(exc).__name__}: {exc}"
            )
            # the turns it made before it failed (max turns, a guardrail) were billed: the
            # SDK's exceptions carry the run's data, and the loop records what they used
            run_data = getattr(exc, "run_data", None)
            spent = getattr(getattr(run_data, "context_wrapper", None), "usage", None)
            if spent is not None:
                with_billed_usage(failure, _usage(spent))
            raise failure from exc
        produced = result.to_input_list()[len(history) :]
        return ModelResponse(
            text=_final_text(result.final_output),
            usage=_usage(result.context_wrapper.usage),
            memory_items=tuple(to_memory(item) for item in produced),
        )


def tether_agent(
    agent: SdkAgent[Any],
    *,
    name: str | None = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    run_config: RunConfig | None = None,
    options: AgentOptions | None = None,
) -> Agent:
    """A Tether agent that runs the SDK ``agent`` (see the module doc).

    Args:
        agent: the SDK agent.
        name: the Tether agent name (default: the SDK agent's name).
        max_turns: model turns of one SDK run.
        run_config: the SDK ``RunConfig`` of every run.
        options: Tether loop options (limits, redaction-independent behaviour); the default
            allows the one step an SDK run takes.
    """
    model = SdkRunnerModel(agent, max_turns=max_turns, run_config=run_config)
    return Agent(
        model,
        f"openai-agents:{agent.name}",
        name=name or agent.name,
        options=options or AgentOptions(max_steps=1),
    )


def tether_agents(
    *agents: SdkAgent[Any], max_turns: int = DEFAULT_MAX_TURNS, run_config: RunConfig | None = None
) -> dict[str, Callable[[], Agent]]:
    """``TETHER_AGENTS`` for the SDK agents, each registered under its SDK name."""

    def factory(agent: SdkAgent[Any]) -> Callable[[], Agent]:
        return lambda: tether_agent(agent, max_turns=max_turns, run_config=run_config)

    return {agent.name: factory(agent) for agent in agents}
