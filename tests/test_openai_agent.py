"""An agent tool loop through OpenAIChatModel against a local OpenAI-compatible server."""

from __future__ import annotations

from pydantic import SecretStr

from tests.support.fake_openai import FakeOpenAI
from tether import Agent, ModelResponse, project_events, tool
from tether.models.openai import OpenAIChatModel
from tether.persistence.codec import dumps_event, dumps_snapshot


@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


def test_tool_loop_over_http_keeps_the_key_out_of_everything(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(
        [
            ModelResponse.call("call_w", "weather", {"city": "Oslo"}),
            ModelResponse.final("It is sunny in Oslo."),
        ]
    )
    model = OpenAIChatModel(fake_openai.base_url, SecretStr(fake_openai.api_key), timeout_s=10)
    agent = Agent(model, "gpt-test", tools=[weather], system_prompt="Be brief.")
    session = agent.new_session("oslo")
    result = session.run("Weather in Oslo?")
    assert result.output == "It is sunny in Oslo."
    assert [r.output for r in result.tool_results] == ["sunny in Oslo"]
    second = fake_openai.requests[1].body
    assert second["model"] == "gpt-test"
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_w",
        "content": "sunny in Oslo",
    }
    assert project_events(session.events) == session.memory_snapshot()
    key = fake_openai.api_key
    stored = [dumps_event(e) for e in session.events]
    stored.append(dumps_snapshot(session.snapshot()).decode())
    stored.append(result.model_dump_json())
    stored.append(repr(model))
    assert all(key not in text for text in stored)
