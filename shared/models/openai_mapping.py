"""Tether's items and tools as the ``openai`` SDK's request types, and its answers back.

Two APIs, one shape each way:

- requests: :func:`chat_messages` / :func:`chat_tools` (Chat Completions) and
  :func:`responses_input` / :func:`responses_tools` (Responses API). The system prompt comes
  first (Responses: as ``instructions``), then the summary as a system message, then the items;
  reasoning items are not sent (they are private to this runtime).
- answers: :func:`chat_response` and :func:`responses_response` give a
  :class:`~tether.models.base.ModelResponse`, usage included (input, output, cached, reasoning).

The SDK does not validate answers (a compatible server may send anything), so the parsers read
them defensively and raise :class:`MalformedAnswer` naming what is missing; the model clients
turn that into a :class:`~tether.errors.ModelError` quoting the answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from openai.types.chat import (
    ChatCompletion,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
)
from openai.types.completion_usage import CompletionUsage
from openai.types.responses import (
    EasyInputMessageParam,
    FunctionToolParam,
    Response,
    ResponseFunctionToolCallParam,
    ResponseInputItemParam,
    ResponseUsage,
)
from openai.types.responses.response_input_item_param import FunctionCallOutput

from tether.core.events import Usage
from tether.core.items import (
    AssistantMessage,
    Item,
    Reasoning,
    ToolCall,
    ToolCallsMessage,
    ToolOutput,
    UserMessage,
)
from tether.errors import ModelError
from tether.models.base import ModelRequest, ModelResponse, ToolSpec

SUMMARY_PREFIX = "Summary of earlier conversation:\n"
"""Prefix of the system message that carries ``ModelRequest.summary``."""


class MalformedAnswer(ValueError):
    """An answer the client cannot read; the message says what is wrong with it."""


# --- requests: Chat Completions ---------------------------------------------------------------


def chat_messages(request: ModelRequest) -> list[ChatCompletionMessageParam]:
    """The ``messages`` of a chat request."""
    messages: list[ChatCompletionMessageParam] = []
    if request.system_prompt:
        messages.append({"role": "system", "content": request.system_prompt})
    if request.summary:
        messages.append({"role": "system", "content": SUMMARY_PREFIX + request.summary})
    for item in request.items:
        message = _chat_message(item)
        if message is not None:
            messages.append(message)
    return messages


def _chat_message(item: Item) -> ChatCompletionMessageParam | None:
    if isinstance(item, UserMessage):
        return {"role": "user", "content": item.content}
    if isinstance(item, AssistantMessage):
        return {"role": "assistant", "content": item.content}
    if isinstance(item, ToolCallsMessage):
        calls: list[ChatCompletionMessageFunctionToolCallParam] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in item.tool_calls
        ]
        return {"role": "assistant", "content": item.content or None, "tool_calls": calls}
    if isinstance(item, ToolOutput):
        return {"role": "tool", "tool_call_id": item.call_id, "content": item.output}
    if isinstance(item, Reasoning):
        return None
    raise _unsendable(item)


def chat_tools(specs: Sequence[ToolSpec]) -> list[ChatCompletionFunctionToolParam]:
    """The ``tools`` of a chat request."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": plain(spec.parameters),
            },
        }
        for spec in specs
    ]


# --- requests: Responses API ---------------------------------------------------------------------


def responses_input(request: ModelRequest) -> list[ResponseInputItemParam]:
    """The ``input`` of a Responses API request (the system prompt goes in ``instructions``)."""
    items: list[ResponseInputItemParam] = []
    if request.summary:
        summary: EasyInputMessageParam = {
            "role": "system",
            "content": SUMMARY_PREFIX + request.summary,
        }
        items.append(summary)
    for item in request.items:
        items.extend(_responses_items(item))
    return items


def _responses_items(item: Item) -> list[ResponseInputItemParam]:
    if isinstance(item, UserMessage):
        return [EasyInputMessageParam(role="user", content=item.content)]
    if isinstance(item, AssistantMessage):
        return [EasyInputMessageParam(role="assistant", content=item.content)]
    if isinstance(item, ToolCallsMessage):
        out: list[ResponseInputItemParam] = []
        if item.content:
            out.append(EasyInputMessageParam(role="assistant", content=item.content))
        for call in item.tool_calls:
            out.append(
                ResponseFunctionToolCallParam(
                    type="function_call", call_id=call.id, name=call.name, arguments=call.arguments
                )
            )
        return out
    if isinstance(item, ToolOutput):
        return [
            FunctionCallOutput(
                type="function_call_output", call_id=item.call_id, output=item.output
            )
        ]
    if isinstance(item, Reasoning):
        return []
    raise _unsendable(item)


def responses_tools(specs: Sequence[ToolSpec]) -> list[FunctionToolParam]:
    """The ``tools`` of a Responses API request (function tools, not strict)."""
    return [
        {
            "type": "function",
            "name": spec.name,
            "description": spec.description,
            "parameters": plain(spec.parameters),
            "strict": False,
        }
        for spec in specs
    ]


def _unsendable(item: Item) -> ModelError:
    return ModelError(
        f"memory item of type {type(item).__name__} cannot be sent by Tether's OpenAI clients; "
        "remove it from the session, or run the session with the framework that wrote it"
    )


def plain(value: Any) -> Any:
    """Nested mappings/sequences as dicts/lists (json cannot encode e.g. MappingProxyType)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain(v) for v in value]
    return value


# --- answers -----------------------------------------------------------------------------------


def chat_response(completion: ChatCompletion) -> ModelResponse:
    """A :class:`ModelResponse` from a chat completion (its first choice).

    Tool calls without an id get ``call_<index>``; arguments sent as an object (some compatible
    servers do) are re-encoded as JSON text, and missing ones become ``{}``.

    Raises:
        MalformedAnswer: no ``choices[0].message``, or a tool call without a function name.
    """
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise MalformedAnswer("no choices; check that the endpoint is a chat-completions API")
    message = getattr(choices[0], "message", None)
    if message is None or isinstance(message, str | int | float | list):
        raise MalformedAnswer("no choices[0].message object")
    text = content_text(getattr(message, "content", None))
    raw_calls = getattr(message, "tool_calls", None) or []
    legacy = getattr(message, "function_call", None)
    if not raw_calls and legacy is not None:
        raw_calls = [{"function": legacy}]  # the legacy single-call form
    if not isinstance(raw_calls, list):
        raise MalformedAnswer(f"tool_calls of type {type(raw_calls).__name__}")
    calls = tuple(_chat_call(raw, index) for index, raw in enumerate(raw_calls))
    return ModelResponse(text=text, tool_calls=calls, usage=chat_usage(completion.usage))


def _chat_call(raw: Any, index: int) -> ToolCall:
    function = _field(raw, "function")
    name = _field(function, "name")
    if not isinstance(name, str) or not name:
        raise MalformedAnswer(f"tool_calls[{index}] has no function name")
    call_id = _field(raw, "id")
    return tool_call(call_id, name, _field(function, "arguments"), index)


def tool_call(call_id: Any, name: str, arguments: Any, index: int) -> ToolCall:
    """A :class:`ToolCall` with an id (``call_<index>`` if none) and JSON-text arguments."""
    if arguments is None or arguments == "":
        arguments = "{}"
    elif not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return ToolCall(id=str(call_id or f"call_{index}"), name=name, arguments=arguments)


def content_text(content: Any) -> str | None:
    """A message's content as text: a string, or the text of a list of content parts."""
    if content is None or isinstance(content, str):
        return content or None
    if isinstance(content, list):
        parts = [_field(part, "text") for part in content]
        return "".join(p for p in parts if isinstance(p, str)) or None
    raise MalformedAnswer(f"content of type {type(content).__name__}, expected a string")


def chat_usage(usage: CompletionUsage | None) -> Usage:
    """Usage of a chat completion: prompt, completion, cached and reasoning tokens."""
    return _usage(usage, ("prompt_tokens", "completion_tokens"), "prompt", "completion")


def responses_response(response: Response) -> ModelResponse:
    """A :class:`ModelResponse` from a Responses API response: the text of its messages and its
    function calls, in output order.

    Raises:
        MalformedAnswer: no ``output`` list, or a function call without a name.
    """
    output = getattr(response, "output", None)
    if not isinstance(output, list):
        raise MalformedAnswer("no output list; check that the endpoint is a Responses API")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for item in output:
        kind = _field(item, "type")
        if kind == "message":
            texts.append(content_text(_field(item, "content")) or "")
        elif kind == "function_call":
            name = _field(item, "name")
            if not isinstance(name, str) or not name:
                raise MalformedAnswer(f"output function_call #{len(calls)} has no name")
            calls.append(
                tool_call(_field(item, "call_id"), name, _field(item, "arguments"), len(calls))
            )
    return ModelResponse(
        text="".join(texts) or None,
        tool_calls=tuple(calls),
        usage=responses_usage(getattr(response, "usage", None)),
    )


def responses_usage(usage: ResponseUsage | None) -> Usage:
    """Usage of a response: input, output, cached and reasoning tokens."""
    return _usage(usage, ("input_tokens", "output_tokens"), "input", "output")


def _usage(usage: Any, totals: tuple[str, str], given: str, produced: str) -> Usage:
    """Usage from ``<given>_tokens_details.cached_tokens`` and
    ``<produced>_tokens_details.reasoning_tokens`` and the two ``totals`` fields (the two APIs
    name the same counts differently)."""
    if usage is None:
        return Usage()
    into = _int(_field(usage, totals[0]))
    out = _int(_field(usage, totals[1]))
    return Usage(
        input_tokens=into,
        output_tokens=out,
        total_tokens=_int(_field(usage, "total_tokens")) or into + out,
        cached_tokens=_int(_field(_field(usage, f"{given}_tokens_details"), "cached_tokens")),
        reasoning_tokens=_int(
            _field(_field(usage, f"{produced}_tokens_details"), "reasoning_tokens")
        ),
    )


def _field(value: Any, name: str) -> Any:
    """``value.name`` or ``value[name]`` (unvalidated SDK objects may hold plain dicts), else
    None."""
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _int(value: Any) -> int:
    # a count below zero is no count: a server reporting one drove a run's usage, its cost and
    # its tenant's day negative, and so under every budget
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def quote(answer: Any) -> str:
    """An answer as JSON text, for an error message (callers scrub and shorten it)."""
    try:
        return str(answer.model_dump_json(warnings=False))
    except Exception:  # not an SDK model, or one too broken to dump
        return json.dumps(answer, default=repr)
