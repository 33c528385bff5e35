"""The model-client seam: what the agent loop sends to a model and what it gets back.

Implementations: :class:`tether.models.scripted.ScriptedModel` (deterministic, for tests and demo
agents), and on the official ``openai`` SDK :class:`tether.models.openai.OpenAIChatModel` (Chat
Completions, any OpenAI-compatible endpoint) and :class:`tether.models.openai.OpenAIResponsesModel`
(the Responses API); all of them stream.

A client that can stream also implements :class:`StreamingModelClient`: its ``stream`` answers
exactly like ``complete`` and hands each piece of the answer to a sink as it arrives.
The pieces are for people watching (ephemeral, never stored); the returned response is the one
the session commits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from tether.core.events import Usage
from tether.core.items import AssistantMessage, Item, ToolCall, ToolCallsMessage

E = TypeVar("E", bound=BaseException)


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


@dataclass(frozen=True)
class ModelDelta:
    """One piece of a model's answer while it streams.

    Attributes:
        kind: ``text`` (the answer's text) or ``tool_arguments`` (a tool call's JSON arguments).
        text: the new characters.
        call_index: which tool call of the response the arguments belong to (``tool_arguments``).
        call_id: the tool call's id, on the first piece of a call when the model sends it.
        tool_name: the tool's name, on the first piece of a call when the model sends it.
    """

    kind: Literal["text", "tool_arguments"]
    text: str
    call_index: int = 0
    call_id: str | None = None
    tool_name: str | None = None


DeltaSink = Callable[[ModelDelta], None]
"""Where a streaming client hands each :class:`ModelDelta` (called on the caller's thread)."""


@runtime_checkable
class StreamingModelClient(ModelClient, Protocol):
    """A :class:`ModelClient` that can also stream its answer."""

    def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Answer ``request`` as :meth:`complete` does, calling ``on_delta`` with each piece as
        it arrives. The return value is the whole answer; the pieces add up to its text and
        tool-call arguments. Raise :class:`tether.errors.ModelError` on failure (pieces already
        handed out are then void)."""


def with_billed_usage(error: E, usage: Usage) -> E:
    """``error`` (a :class:`~tether.errors.ModelError`) carrying, as its ``usage`` attribute,
    the tokens the provider reported for an answer the client could not use: it answered, so
    the call was billed, and the agent loop records them (a ``MODEL_USAGE`` event) before the
    run fails. A usage without tokens is not attached."""
    if usage != Usage():
        error.usage = usage  # type: ignore[attr-defined]
    return error


def billed_usage(error: BaseException) -> Usage | None:
    """The tokens ``error`` says its call was billed for (see :func:`with_billed_usage`); None
    when it says nothing (no answer, or one without usage)."""
    usage = getattr(error, "usage", None)
    return usage if isinstance(usage, Usage) else None
