"""The model-client seam: what the agent loop sends to a model and what it gets back.

Implementations: :class:`tether.models.scripted.ScriptedModel` (deterministic, for tests and demo
agents) and :class:`tether.models.openai.OpenAIChatModel` (any OpenAI-compatible endpoint).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tether.core.events import Usage
from tether.core.items import AssistantMessage, Item, ToolCall, ToolCallsMessage


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool: its name, description and JSON schema."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class ModelRequest:
    """One request to a model.

    Attributes:
        model: the model name.
        system_prompt: the agent's instructions (None: none).
        summary: compacted history, shown to the model as a leading system message.
        items: the projected conversation items.
        tools: the tools the model may call.
        parallel_tool_calls: whether the model may ask for several calls at once.
    """

    model: str
    items: tuple[Item, ...]
    system_prompt: str | None = None
    summary: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    parallel_tool_calls: bool = False


@dataclass(frozen=True)
class ModelResponse:
    """A model's answer: text and/or tool calls, usage, and the items to store in memory."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    memory_items: tuple[Item, ...] | None = None

    def items_for_memory(self) -> tuple[Item, ...]:
        """The items this response adds to memory (explicit ones, else derived)."""
        if self.memory_items is not None:
            return self.memory_items
        if self.tool_calls:
            return (ToolCallsMessage(content=self.text or "", tool_calls=self.tool_calls),)
        return (AssistantMessage(content=self.text or ""),)

    @classmethod
    def final(cls, text: str, *, usage: Usage | None = None) -> ModelResponse:
        """A final answer."""
        return cls(text=text, usage=usage or Usage())

    @classmethod
    def call(
        cls, call_id: str, name: str, arguments: str | Mapping[str, Any] = "{}", *, text: str = ""
    ) -> ModelResponse:
        """A response asking for one tool call (``arguments`` as JSON text or a mapping)."""
        import json

        args = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
        return cls(text=text or None, tool_calls=(ToolCall(id=call_id, name=name, arguments=args),))

    @classmethod
    def calls(cls, *calls: ToolCall, text: str = "") -> ModelResponse:
        """A response asking for several tool calls."""
        return cls(text=text or None, tool_calls=tuple(calls))


@runtime_checkable
class ModelClient(Protocol):
    """A chat model with tool calling."""

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one request. Raise :class:`tether.errors.ModelError` on failure."""
