"""Memory items: the typed, JSON-round-trippable entries of a session's memory.

Items are frozen pydantic models tagged by ``type``. Being immutable, they can be shared between
memory, events and snapshots without defensive copies, and a fold can never mutate live memory.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter

from tether.core.waits import WaitFor


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """One tool invocation requested by the model.

    ``arguments`` is the raw JSON text the model produced; it may be invalid, in which case the
    call becomes a tool-error result instead of being executed.
    """

    id: str
    name: str
    arguments: str = "{}"


class UserMessage(_Frozen):
    """Input from the user."""

    type: Literal["user_message"] = "user_message"
    content: str


class AssistantMessage(_Frozen):
    """A plain assistant answer."""

    type: Literal["assistant_message"] = "assistant_message"
    content: str


class ToolCallsMessage(_Frozen):
    """An assistant turn that asks for tool calls (content may be empty)."""

    type: Literal["tool_calls"] = "tool_calls"
    content: str = ""
    tool_calls: tuple[ToolCall, ...]


class ToolOutput(_Frozen):
    """The output of one tool call, matched to its call by ``call_id``."""

    type: Literal["tool_output"] = "tool_output"
    call_id: str
    name: str = ""
    output: str
    wait_for: WaitFor | None = Field(default=None, exclude_if=lambda v: v is None)
    """While the call is parked on the fleet (a timer, a signal, children): what it waits for.
    Cleared when its output is given; omitted from the JSON when None (event schema v5)."""


class Reasoning(_Frozen):
    """Model reasoning text kept in memory (old ones can be trimmed from prompts)."""

    type: Literal["reasoning"] = "reasoning"
    text: str


class ExternalItem(_Frozen):
    """An item in another framework's format, kept verbatim so it round-trips losslessly (e.g.
    an OpenAI Agents SDK item, ``source="openai-agents"``; see :mod:`tether.integrations`).

    ``text`` is a plain rendering for search and size estimates; ``data`` is the item itself.
    Tether's own model clients do not send it (the framework that wrote it does). Added in
    event schema v2.
    """

    type: Literal["external"] = "external"
    source: str
    text: str = ""
    data: dict[str, JsonValue]


Item = Annotated[
    UserMessage | AssistantMessage | ToolCallsMessage | ToolOutput | Reasoning | ExternalItem,
    Field(discriminator="type"),
]
"""Any memory item (a tagged union)."""

ITEM_ADAPTER: TypeAdapter[Item] = TypeAdapter(Item)
ITEMS_ADAPTER: TypeAdapter[list[Item]] = TypeAdapter(list[Item])


def item_text(item: Item) -> str:
    """A plain-text rendering used for size estimates and search."""
    if isinstance(item, ToolCallsMessage):
        calls = " ".join(f"{c.name}({c.arguments})" for c in item.tool_calls)
        return f"{item.content} {calls}".strip()
    if isinstance(item, ToolOutput):
        return item.output
    if isinstance(item, Reasoning | ExternalItem):
        return item.text
    return item.content


def approx_chars(item: Item) -> int:
    """Approximate size of an item, in characters of its JSON form."""
    return len(item.model_dump_json())
