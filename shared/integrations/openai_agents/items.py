"""Lossless mapping between OpenAI Agents SDK items (JSON dicts) and Tether memory items.

An SDK item is stored as an :class:`~tether.core.items.ExternalItem` holding the item's JSON
verbatim, so reading it back gives an equal dict. The one exception is a plain user message,
``{"role": "user", "content": "..."}``, stored as a Tether
:class:`~tether.core.items.UserMessage`, which maps back to exactly that dict: Tether's
compaction and demo agents recognise user turns by that type, and a run submitted to a worker
records its input as one.

Items that Tether's own agents wrote are given to the SDK in its input format (a tool-calls turn
becomes one ``function_call`` item per call); reasoning items are private to Tether's runtime
and are not given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pydantic
from pydantic import JsonValue

from tether.core.items import (
    AssistantMessage,
    ExternalItem,
    Item,
    Reasoning,
    ToolCallsMessage,
    ToolOutput,
    UserMessage,
)
from tether.errors import InvalidInput

SOURCE = "openai-agents"
"""``ExternalItem.source`` of items written through this integration."""

SdkItem = dict[str, Any]

_TOO_DEEP = (
    "an Agents SDK item is nested too deeply to store (JSON in it nests past about 250 levels); "
    "flatten it, or store the deep part as a JSON string. Nothing was stored"
)


#: How deep :func:`_copied` follows an item before it leaves the item to the JSON round trip.
_COPY_DEPTH = 32

_SCALARS = (str, int, float, bool, type(None))


def _copied(value: Any, depth: int = 0) -> Any:
    """``value`` copied when it holds only JSON's own types (a dict with text keys, a list,
    text, a number, a bool, None: the round trip through JSON gives the same), else
    :data:`NotImplemented`.

    The SDK's items are nearly always such plain values: copying them directly costs a fraction
    of a round trip through JSON text, which ``add_items`` paid on every call."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if depth >= _COPY_DEPTH:
        return NotImplemented
    if kind is dict:
        copy = {}
        for key, each in value.items():
            if type(key) is not str:
                return NotImplemented
            copy[key] = inner = _copied(each, depth + 1)
            if inner is NotImplemented:
                return NotImplemented
        return copy
    if kind is list:
        items = [_copied(each, depth + 1) for each in value]
        return NotImplemented if NotImplemented in items else items
    return NotImplemented


def _plain_json(item: Mapping[str, Any]) -> dict[str, JsonValue]:
    """A deep, JSON-only copy (the SDK hands out TypedDicts that callers may mutate later)."""
    copied: Any = _copied(item)
    if type(copied) is dict:
        return copied
    try:
        copied = json.loads(json.dumps(item))
    except RecursionError:
        raise InvalidInput(_TOO_DEEP) from None
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            f"an Agents SDK item must be JSON (as to_input_list() gives them): {exc}; convert "
            "it with item.model_dump(mode='json') first"
        ) from exc
    if not isinstance(copied, dict):
        raise InvalidInput(f"an Agents SDK item must be a JSON object, not {type(item).__name__}")
    return copied


def _content_text(content: JsonValue) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for part in content:
        if isinstance(part, dict):
            text = part.get("text", part.get("refusal"))
            if isinstance(text, str):
                parts.append(text)
    return "\n".join(parts)


def item_text(data: Mapping[str, JsonValue]) -> str:
    """A plain rendering of an SDK item, for search, size estimates and people."""
    kind = data.get("type")
    if "role" in data and kind in (None, "message"):
        return _content_text(data.get("content"))
    if kind == "function_call":
        return f"{data.get('name', '')}({data.get('arguments', '')})"
    if kind == "function_call_output":
        output = data.get("output")
        return output if isinstance(output, str) else json.dumps(output)
    if kind == "reasoning":
        summary = data.get("summary")
        return _content_text(summary) if isinstance(summary, list) else ""
    return ""


def to_memory(item: Mapping[str, Any]) -> Item:
    """The Tether memory item that stores ``item`` (see the module doc).

    Raises:
        InvalidInput: the item is not a JSON object.
    """
    if type(item) is dict and len(item) == 2 and item.get("role") == "user":
        content = item.get("content")
        if type(content) is str:  # the common item, and text is immutable: nothing to copy
            return UserMessage(content=content)
    data = _plain_json(item)
    if set(data) == {"role", "content"} and data["role"] == "user":
        content = data["content"]
        if isinstance(content, str):
            return UserMessage(content=content)
    try:
        return ExternalItem(source=SOURCE, text=item_text(data), data=data)
    except pydantic.ValidationError as exc:
        if any(e["type"] == "recursion_depth_exceeded" for e in exc.errors()):
            raise InvalidInput(_TOO_DEEP) from None
        raise InvalidInput(
            f"an Agents SDK item cannot be stored: {exc.errors()[0]['msg']}"
        ) from None


def from_memory(item: Item) -> list[SdkItem]:
    """The SDK items a memory item stands for (a fresh copy each time).

    Raises:
        InvalidInput: an external item written by another framework.
    """
    if isinstance(item, ExternalItem):
        if item.source != SOURCE:
            raise InvalidInput(
                f"memory holds an item of {item.source!r}, which the OpenAI Agents SDK cannot "
                "read; fork the session before that item (tether sessions history/fork)"
            )
        data: Any = _copied(item.data)  # a stored item holds JSON's own types alone
        return [data if type(data) is dict else json.loads(json.dumps(item.data))]
    if isinstance(item, UserMessage):
        return [{"role": "user", "content": item.content}]
    if isinstance(item, AssistantMessage):
        return [{"role": "assistant", "content": item.content}]
    if isinstance(item, ToolCallsMessage):
        said: list[SdkItem] = []
        if item.content:
            said.append({"role": "assistant", "content": item.content})
        return said + [
            {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
            for c in item.tool_calls
        ]
    if isinstance(item, ToolOutput):
        return [{"type": "function_call_output", "call_id": item.call_id, "output": item.output}]
    assert isinstance(item, Reasoning)
    return []  # reasoning is private to Tether's runtime
