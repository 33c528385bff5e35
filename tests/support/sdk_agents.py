"""OpenAI Agents SDK agents for tests, on a model stub built on the SDK's own ``Model`` interface
(no network). Worker processes load this module through ``TETHER_AGENT_MODULES``; tests import
the agents directly.

The ``shouter`` agent takes two model turns per run, so every run goes through the SDK's tool
loop: the stub first calls the ``shout`` tool with the newest user text, then answers
``heard <TOOL OUTPUT> after <n> user turns``, counting the user turns in the input it was given
(which is how a test sees that a run got the session's earlier turns).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, ModelResponse, Usage, function_tool, set_tracing_disabled
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputItem,
    ResponseOutputMessage,
    ResponseOutputText,
)

from tether.integrations.openai_agents import tether_agents

set_tracing_disabled(True)  # nothing may leave the machine


def _items(input: str | list[Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": input}] if isinstance(input, str) else list(input)


def _is_user(item: dict[str, Any]) -> bool:
    return item.get("role") == "user"


def _user_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return " ".join(str(part.get("text", "")) for part in content or [])


class StubModel(Model):
    """Turn 1 calls ``shout`` on the newest user text; turn 2 answers with the tool output."""

    def __init__(self) -> None:
        self.calls: list[list[dict[str, Any]]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
        **kwargs: Any,
    ) -> ModelResponse:
        items = _items(input)
        self.calls.append(items)
        return ModelResponse(output=respond(items), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the stub model does not stream; use Runner.run")


def respond(items: list[dict[str, Any]]) -> list[ResponseOutputItem]:
    """What the stub answers to ``items`` (see the module doc)."""
    n = len(items)
    last = items[-1]
    if last.get("type") == "function_call_output":
        turns = sum(1 for item in items if _is_user(item))
        text = f"heard {last['output']} after {turns} user turns"
        part = ResponseOutputText(type="output_text", text=text, annotations=[])
        return [
            ResponseOutputMessage(
                id=f"msg_{n}", type="message", role="assistant", status="completed", content=[part]
            )
        ]
    newest = next(_user_text(item) for item in reversed(items) if _is_user(item))
    return [
        ResponseFunctionToolCall(
            id=f"fc_{n}",
            call_id=f"call_{n}",
            type="function_call",
            name="shout",
            arguments=json.dumps({"text": newest}),
            status="completed",
        )
    ]


@function_tool
def shout(text: str) -> str:
    """Say ``text`` loudly."""
    return text.upper()


def shouter() -> Agent[Any]:
    """The test agent, with a fresh stub model."""
    return Agent(
        name="shouter", instructions="Shout what you hear.", tools=[shout], model=StubModel()
    )


TETHER_AGENTS = tether_agents(shouter())
