"""An Agents SDK agent as a Tether agent, talking over HTTP to the test OpenAI server process
(tests/support/openai_server.py) through the SDK's own ``AsyncOpenAI`` client, as the SDK
documents pointing at an endpoint:

- every run on one process completes: each SDK run had a fresh event loop, closed after it,
  under the client's pooled connections, so every second run failed with "Event loop is
  closed" (after its request had reached the provider);
- a run the SDK gives up on (max turns) reports the tokens of the turns it made: they were
  billed, and the failed run counted none.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.openai_fixture import OpenAIServer, reply
from tether.core.events import EventType, ModelUsagePayload, Usage
from tether.core.results import RunStatus
from tether.errors import ModelError
from tether.integrations.openai_agents import tether_agent
from tether.worker.engine.spend import run_usage


def sdk_agent(server: OpenAIServer, **kwargs: Any) -> Any:
    from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    client = AsyncOpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0)
    model = OpenAIChatCompletionsModel(model="test-model", openai_client=client)
    return Agent(name="helper", instructions="help", model=model, tools=[lookup], **kwargs)


def test_runs_after_the_first_still_complete_on_one_process(openai_server: OpenAIServer) -> None:
    agent = tether_agent(sdk_agent(openai_server))
    openai_server.script([reply(f"answer {n}") for n in range(3)])
    results = [agent.new_session(f"s-{n}").run(f"question {n}") for n in range(3)]
    assert [(r.status, r.output) for r in results] == [
        (RunStatus.COMPLETED, f"answer {n}") for n in range(3)
    ]


def test_a_run_the_sdk_gives_up_on_reports_the_tokens_of_its_turns(
    openai_server: OpenAIServer,
) -> None:
    agent = tether_agent(sdk_agent(openai_server), max_turns=2)
    usage = {"input_tokens": 1000, "output_tokens": 500}
    openai_server.script(
        [reply(None, [(f"c{n}", "lookup", '{"key": "k"}')], usage=usage) for n in range(3)]
    )
    session = agent.new_session("s-turns")
    with pytest.raises(ModelError, match="MaxTurnsExceeded"):
        session.run("go")
    (recorded,) = [e.payload for e in session.events if e.type is EventType.MODEL_USAGE]
    assert isinstance(recorded, ModelUsagePayload) and recorded.call == "unusable_answer"
    assert recorded.usage == Usage(input_tokens=2000, output_tokens=1000, total_tokens=3000)
    assert run_usage(session, 1) == recorded.usage  # what a worker reports for the failed run
