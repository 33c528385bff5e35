"""An agent's tool loop through the SDK-backed clients and a real server process, in-process:
the tool result goes back to the model, usage (cached and reasoning tokens too) adds up over the
run, and the key is in none of what a session stores or returns."""

from __future__ import annotations

import json

import pytest
from pydantic import SecretStr

from tests.support.openai_fixture import OpenAIServer, reply
from tether import Agent, project_events, tool
from tether.core.events import EventType, ModelResponsePayload, Usage
from tether.models.openai import OpenAIChatModel, OpenAIResponsesModel
from tether.persistence.codec import dumps_event, dumps_snapshot

APIS = {"chat": OpenAIChatModel, "responses": OpenAIResponsesModel}


@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


@pytest.mark.parametrize("api", APIS)
def test_tool_loop_over_http_keeps_the_key_out_of_everything(
    openai_server: OpenAIServer, api: str
) -> None:
    openai_server.script(
        [
            reply(
                None,
                [("call_w", "weather", '{"city": "Oslo"}')],
                usage={"input_tokens": 50, "output_tokens": 10, "cached_tokens": 40},
            ),
            reply(
                "It is sunny in Oslo.",
                usage={"input_tokens": 70, "output_tokens": 20, "reasoning_tokens": 12},
            ),
        ]
    )
    model = APIS[api](openai_server.base_url, SecretStr(openai_server.api_key), timeout_s=10)
    agent = Agent(model, "test-model", tools=[weather], system_prompt="Be brief.")
    session = agent.new_session("oslo")

    result = session.run("Weather in Oslo?")

    assert result.output == "It is sunny in Oslo."
    assert [r.output for r in result.tool_results] == ["sunny in Oslo"]
    assert result.usage == Usage(
        input_tokens=120, output_tokens=30, total_tokens=150, cached_tokens=40, reasoning_tokens=12
    )
    second = openai_server.requests()[1].body
    assert second["model"] == "test-model"
    if api == "chat":
        assert second["messages"][-1] == {
            "role": "tool",
            "tool_call_id": "call_w",
            "content": "sunny in Oslo",
        }
    else:
        assert second["instructions"] == "Be brief."
        assert second["input"][-1] == {
            "type": "function_call_output",
            "call_id": "call_w",
            "output": "sunny in Oslo",
        }
    assert project_events(session.events) == session.memory_snapshot()
    responses = [e for e in session.events if e.type is EventType.MODEL_RESPONSE]
    assert all(isinstance(e.payload, ModelResponsePayload) for e in responses)
    assert [json.loads(dumps_event(e))["v"] for e in responses] == [3, 3]  # they count details
    key = openai_server.api_key
    stored = [dumps_event(e) for e in session.events]
    stored.append(dumps_snapshot(session.snapshot()).decode())
    stored.append(result.model_dump_json())
    stored.append(repr(model))
    assert all(key not in text for text in stored)
