"""What the test OpenAI server answers: one scripted reply rendered in the shape of each API.

A reply is a JSON object (it crosses a process boundary in ``POST /_control/script``):

- ``text`` (str or null) and ``tool_calls`` (a list of ``{"id", "name", "arguments"}``);
- ``usage``: ``input_tokens``, ``output_tokens``, ``cached_tokens``, ``reasoning_tokens``;
- ``status`` and ``message``: an error answer (status >= 400) with that message;
- ``headers``: extra response headers;
- ``delay_s``: wait before answering; ``chunk_delay_s``: wait before each streamed chunk;
- ``malformed``: a non-streamed answer whose body is not JSON, or, streamed, a chunk that is
  not JSON after the first piece. Either echoes the key the server received (hostile on
  purpose: clients must scrub what they quote);
- ``body``: a JSON document sent as the non-streamed answer, as it is (for unusable answers);
- ``midstream_error``: streamed, an error after the first piece (chat: a chunk holding an
  ``error`` object; responses: an ``error`` event) with this message, then nothing more.

Pure functions: :mod:`tests.support.openai_server` serves what they build.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

CREATED = 1_700_000_000
TEXT_PIECE_CHARS = 5
ARGUMENT_PIECE_CHARS = 8
DEFAULT_USAGE = {"input_tokens": 11, "output_tokens": 7, "cached_tokens": 0, "reasoning_tokens": 0}


def pieces(text: str, size: int) -> list[str]:
    """``text`` cut into pieces of at most ``size`` characters (none for empty text)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def usage_of(reply: Mapping[str, Any]) -> dict[str, int]:
    """The reply's token counts, defaults filled in."""
    return {**DEFAULT_USAGE, **reply.get("usage", {})}


def malformed_chunk(received_key: str) -> str:
    """A chunk that is not JSON (cut off mid-object), echoing the key the server received."""
    return '{"choices": [{"delta": {"content": "MALFORMED key=' + received_key + " ..."


def error_body(message: str, *, kind: str = "server_error", code: str | None = None) -> Any:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


# --- chat completions ---------------------------------------------------------------------------


def chat_usage(reply: Mapping[str, Any]) -> dict[str, Any]:
    """The ``usage`` object of a chat completion."""
    usage = usage_of(reply)
    return {
        "prompt_tokens": usage["input_tokens"],
        "completion_tokens": usage["output_tokens"],
        "total_tokens": usage["input_tokens"] + usage["output_tokens"],
        "prompt_tokens_details": {"cached_tokens": usage["cached_tokens"]},
        "completion_tokens_details": {"reasoning_tokens": usage["reasoning_tokens"]},
    }


def chat_body(reply: Mapping[str, Any], model: str, serial: int) -> dict[str, Any]:
    """A non-streamed ``chat.completion``."""
    calls = reply.get("tool_calls") or []
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("text")}
    if calls:
        message["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": call.get("arguments", "{}")},
            }
            for call in calls
        ]
    return {
        "id": f"chatcmpl-{serial}",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": chat_usage(reply),
    }


def chat_chunks(
    reply: Mapping[str, Any], model: str, serial: int, *, include_usage: bool, key: str
) -> Iterator[str]:
    """The ``data:`` payloads of a streamed chat completion, ``[DONE]`` last."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return json.dumps(
            {
                "id": f"chatcmpl-{serial}",
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": model,
                "choices": [choice],
            }
        )

    yield chunk({"role": "assistant", "content": ""})
    sent = 0
    for piece in pieces(reply.get("text") or "", TEXT_PIECE_CHARS):
        yield chunk({"content": piece})
        sent += 1
        if sent == 1 and reply.get("malformed"):
            yield malformed_chunk(key)
        if sent == 1 and reply.get("midstream_error"):
            yield json.dumps(error_body(reply["midstream_error"]))
            return
    calls = reply.get("tool_calls") or []
    for index, call in enumerate(calls):
        head = {"index": index, "id": call["id"], "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call["name"], "arguments": ""}}]})
        for piece in pieces(call.get("arguments", "{}"), ARGUMENT_PIECE_CHARS):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            sent += 1
            if sent == 1 and reply.get("malformed"):
                yield malformed_chunk(key)
    yield chunk({}, "tool_calls" if calls else "stop")
    if include_usage:
        yield json.dumps(
            {
                "id": f"chatcmpl-{serial}",
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": model,
                "choices": [],
                "usage": chat_usage(reply),
            }
        )
    yield "[DONE]"


# --- responses ------------------------------------------------------------------------------------


def responses_usage(reply: Mapping[str, Any]) -> dict[str, Any]:
    """The ``usage`` object of a Responses API response."""
    usage = usage_of(reply)
    return {
        "input_tokens": usage["input_tokens"],
        "input_tokens_details": {"cached_tokens": usage["cached_tokens"]},
        "output_tokens": usage["output_tokens"],
        "output_tokens_details": {"reasoning_tokens": usage["reasoning_tokens"]},
        "total_tokens": usage["input_tokens"] + usage["output_tokens"],
    }


def _message_item(serial: int, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {
        "type": "message",
        "id": f"msg_{serial}",
        "role": "assistant",
        "status": status,
        "content": content if status == "completed" else [],
    }


def _call_item(serial: int, index: int, call: Mapping[str, Any], arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{serial}_{index}",
        "call_id": call["id"],
        "name": call["name"],
        "arguments": arguments,
        "status": "completed",
    }


def responses_body(
    reply: Mapping[str, Any], model: str, serial: int, *, status: str = "completed"
) -> dict[str, Any]:
    """A Responses API ``response`` object (``status`` in_progress: no output, no usage yet)."""
    output: list[dict[str, Any]] = []
    if status == "completed":
        if reply.get("text"):
            output.append(_message_item(serial, reply["text"]))
        for index, call in enumerate(reply.get("tool_calls") or []):
            output.append(_call_item(serial, index, call, call.get("arguments", "{}")))
    return {
        "id": f"resp_{serial}",
        "object": "response",
        "created_at": CREATED,
        "model": model,
        "status": status,
        "output": output,
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "usage": responses_usage(reply) if status == "completed" else None,
    }


def responses_events(
    reply: Mapping[str, Any], model: str, serial: int, *, key: str
) -> Iterator[tuple[str, str]]:
    """The ``(event, data)`` pairs of a streamed response, ``response.completed`` last."""
    number = 0

    def event(kind: str, **fields: Any) -> tuple[str, str]:
        nonlocal number
        number += 1
        return kind, json.dumps({"type": kind, "sequence_number": number, **fields})

    yield event(
        "response.created", response=responses_body(reply, model, serial, status="in_progress")
    )
    index = 0
    sent = 0
    text = reply.get("text") or ""
    if text:
        item = _message_item(serial, text, status="in_progress")
        yield event("response.output_item.added", output_index=index, item=item)
        for piece in pieces(text, TEXT_PIECE_CHARS):
            yield event(
                "response.output_text.delta",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                delta=piece,
                logprobs=[],
            )
            sent += 1
            if sent == 1 and reply.get("malformed"):
                yield "response.output_text.delta", malformed_chunk(key)
            if sent == 1 and reply.get("midstream_error"):
                yield event("error", code="server_error", message=reply["midstream_error"])
                return
        yield event(
            "response.output_item.done", output_index=index, item=_message_item(serial, text)
        )
        index += 1
    for number_of_call, call in enumerate(reply.get("tool_calls") or []):
        item = _call_item(serial, number_of_call, call, "")
        yield event("response.output_item.added", output_index=index, item=item)
        arguments = call.get("arguments", "{}")
        for piece in pieces(arguments, ARGUMENT_PIECE_CHARS):
            yield event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=index,
                delta=piece,
            )
            sent += 1
            if sent == 1 and reply.get("malformed"):
                yield "response.function_call_arguments.delta", malformed_chunk(key)
        done = _call_item(serial, number_of_call, call, arguments)
        yield event("response.output_item.done", output_index=index, item=done)
        index += 1
    yield event("response.completed", response=responses_body(reply, model, serial))
