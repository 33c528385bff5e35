"""The SDK-backed model clients against a real server process (tests/support/openai_server.py):
what they send, what they make of the answers, and how they stream.

Every test talks HTTP to the server; nothing of the ``openai`` SDK is mocked. Errors, retries,
timeouts and secrets are in tests/test_openai_errors.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import pytest

from tests.support.openai_fixture import OpenAIServer, reply
from tether.core.events import Usage
from tether.core.items import (
    AssistantMessage,
    Reasoning,
    ToolCall,
    ToolCallsMessage,
    ToolOutput,
    UserMessage,
)
from tether.errors import ModelError
from tether.models.base import (
    ModelClient,
    ModelDelta,
    ModelRequest,
    ModelResponse,
    StreamingModelClient,
    ToolSpec,
)
from tether.models.openai import (
    NO_KEY,
    AzureTarget,
    OpenAIChatModel,
    OpenAIClient,
    OpenAIResponsesModel,
    model_from_settings,
)
from tether.settings import Settings

ADD_TOOL = ToolSpec(
    name="add",
    description="Add two integers.",
    parameters=MappingProxyType(
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ("a", "b"),
        }
    ),
)
#: ADD_TOOL's parameters as sent: plain JSON (the tuple became a list)
ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}
APIS = {"chat": OpenAIChatModel, "responses": OpenAIResponsesModel}
MODES = ("complete", "stream", "acomplete", "astream")


def _request(*items: Any, **kwargs: Any) -> ModelRequest:
    return ModelRequest(model="test-model", items=tuple(items), **kwargs)


def _model(server: OpenAIServer, api: str, **kwargs: Any) -> OpenAIClient:
    return APIS[api](server.base_url, server.api_key, timeout_s=10.0, **kwargs)


def _ignore(delta: ModelDelta) -> None:
    """A sink for tests that look only at the assembled answer."""


def _answer(
    model: OpenAIClient, request: ModelRequest, mode: str, sink: Callable[[ModelDelta], None]
) -> ModelResponse:
    """``request`` answered by ``model`` through one of its four methods."""
    if mode == "complete":
        return model.complete(request)
    if mode == "stream":
        return model.stream(request, sink)
    if mode == "acomplete":
        return asyncio.run(model.acomplete(request))
    return asyncio.run(model.astream(request, sink))


# --- what is sent -------------------------------------------------------------------------------

CONVERSATION = (
    UserMessage(content="add things"),
    Reasoning(text="private thoughts"),
    ToolCallsMessage(
        content="",
        tool_calls=(
            ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}'),
            ToolCall(id="c2", name="add", arguments='{"a": 3, "b": 4}'),
        ),
    ),
    ToolOutput(call_id="c1", name="add", output="3"),
    ToolOutput(call_id="c2", name="add", output="7"),
    ToolCallsMessage(content="one more", tool_calls=(ToolCall(id="c3", name="add"),)),
    ToolOutput(call_id="c3", output="0"),
    AssistantMessage(content="3 and 7"),
    UserMessage(content="thanks"),
)


def test_chat_request_maps_system_summary_and_every_item_type(
    openai_server: OpenAIServer,
) -> None:
    openai_server.script(["ok"])
    request = _request(
        *CONVERSATION,
        system_prompt="You add numbers.",
        summary="The user likes sums.",
        tools=(ADD_TOOL,),
        parallel_tool_calls=True,
    )
    _model(openai_server, "chat").complete(request)

    (sent,) = openai_server.requests()
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.body["model"] == "test-model"

    def call(call_id: str, arguments: str) -> dict[str, Any]:
        function = {"name": "add", "arguments": arguments}
        return {"id": call_id, "type": "function", "function": function}

    assert sent.messages == [
        {"role": "system", "content": "You add numbers."},
        {"role": "system", "content": "Summary of earlier conversation:\nThe user likes sums."},
        {"role": "user", "content": "add things"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("c1", '{"a": 1, "b": 2}'), call("c2", '{"a": 3, "b": 4}')],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "tool", "tool_call_id": "c2", "content": "7"},
        {"role": "assistant", "content": "one more", "tool_calls": [call("c3", "{}")]},
        {"role": "tool", "tool_call_id": "c3", "content": "0"},
        {"role": "assistant", "content": "3 and 7"},
        {"role": "user", "content": "thanks"},
    ]
    assert "private thoughts" not in json.dumps(sent.body)
    assert sent.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add two integers.",
                "parameters": ADD_SCHEMA,
            },
        }
    ]
    assert sent.body["parallel_tool_calls"] is True
    assert "stream" not in sent.body


def test_responses_request_maps_instructions_summary_and_every_item_type(
    openai_server: OpenAIServer,
) -> None:
    openai_server.script(["ok"])
    request = _request(
        *CONVERSATION,
        system_prompt="You add numbers.",
        summary="The user likes sums.",
        tools=(ADD_TOOL,),
    )
    _model(openai_server, "responses").complete(request)

    (sent,) = openai_server.requests()
    assert (sent.method, sent.path) == ("POST", "/v1/responses")
    assert sent.body["instructions"] == "You add numbers."
    assert sent.body["store"] is False  # Tether keeps the memory; nothing stays at the provider

    def call(call_id: str, arguments: str) -> dict[str, Any]:
        return {"type": "function_call", "call_id": call_id, "name": "add", "arguments": arguments}

    def output(call_id: str, text: str) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": call_id, "output": text}

    assert sent.input == [
        {"role": "system", "content": "Summary of earlier conversation:\nThe user likes sums."},
        {"role": "user", "content": "add things"},
        call("c1", '{"a": 1, "b": 2}'),
        call("c2", '{"a": 3, "b": 4}'),
        output("c1", "3"),
        output("c2", "7"),
        {"role": "assistant", "content": "one more"},
        call("c3", "{}"),
        output("c3", "0"),
        {"role": "assistant", "content": "3 and 7"},
        {"role": "user", "content": "thanks"},
    ]
    assert "private thoughts" not in json.dumps(sent.body)
    assert sent.body["tools"] == [
        {
            "type": "function",
            "name": "add",
            "description": "Add two integers.",
            "parameters": ADD_SCHEMA,
            "strict": False,
        }
    ]
    assert sent.body["parallel_tool_calls"] is False


@pytest.mark.parametrize("api", APIS)
def test_a_request_without_tools_sends_no_tools_and_no_parallel_flag(
    openai_server: OpenAIServer, api: str
) -> None:
    openai_server.script(["ok"])
    _model(openai_server, api).complete(
        _request(UserMessage(content="hi"), parallel_tool_calls=True)
    )
    (sent,) = openai_server.requests()
    assert "tools" not in sent.body and "parallel_tool_calls" not in sent.body
    assert "instructions" not in sent.body  # no system prompt, no instructions


def test_headers_carry_the_key_and_extra_headers(openai_server: OpenAIServer) -> None:
    openai_server.script(["ok"])
    with OpenAIChatModel(
        openai_server.base_url + "/",  # a trailing slash must not make //chat/completions
        openai_server.api_key,
        extra_headers={"OpenAI-Organization": "org-test"},
    ) as model:
        assert model.complete(_request(UserMessage(content="hi"))).text == "ok"
    (sent,) = openai_server.requests()
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {openai_server.api_key}"
    assert sent.headers["openai-organization"] == "org-test"


def test_without_a_key_the_placeholder_is_sent(openai_server: OpenAIServer) -> None:
    with pytest.raises(ModelError, match="TETHER_OPENAI_API_KEY"):
        OpenAIChatModel(openai_server.base_url, None, max_retries=0).complete(
            _request(UserMessage(content="hi"))
        )
    (sent,) = openai_server.requests()
    assert sent.headers["authorization"] == f"Bearer {NO_KEY}"  # never $OPENAI_API_KEY


@pytest.mark.parametrize(
    ("api", "path"),
    [
        ("chat", "/openai/deployments/dep-1/chat/completions"),
        ("responses", "/openai/responses"),
    ],
)
def test_azure_sends_to_the_deployment_with_the_api_version_and_api_key_header(
    openai_server: OpenAIServer, api: str, path: str
) -> None:
    openai_server.script(["from azure"])
    azure = AzureTarget(openai_server.root_url, "2024-10-21", "dep-1")
    model = APIS[api](api_key=openai_server.api_key, azure=azure)
    assert model.complete(_request(UserMessage(content="hi"))).text == "from azure"
    (sent,) = openai_server.requests()
    assert sent.path == path
    assert sent.query == {"api-version": "2024-10-21"}
    assert sent.headers["api-key"] == openai_server.api_key
    assert "authorization" not in sent.headers


def test_model_from_settings_follows_the_api_and_azure_settings(
    openai_server: OpenAIServer,
) -> None:
    common = {
        "openai_api_key": openai_server.api_key,
        "openai_timeout_s": 7,
        "openai_max_retries": 0,
    }
    chat = model_from_settings(Settings(openai_base_url=openai_server.base_url, **common))
    responses = model_from_settings(
        Settings(openai_base_url=openai_server.base_url, openai_api="responses", **common)
    )
    assert type(chat) is OpenAIChatModel and type(responses) is OpenAIResponsesModel
    assert (chat.timeout_s, chat.max_retries) == (7, 0)
    azure = model_from_settings(
        Settings(
            openai_azure_endpoint=openai_server.root_url,
            openai_azure_api_version="2024-10-21",
            openai_azure_deployment="dep-9",
            **common,
        )
    )
    openai_server.script(["azure"])
    assert isinstance(azure, OpenAIChatModel)
    azure.complete(_request(UserMessage(content="hi")))
    assert openai_server.requests()[0].path == "/openai/deployments/dep-9/chat/completions"


# --- what comes back ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_text_tool_calls_and_usage_with_cached_and_reasoning_tokens(
    openai_server: OpenAIServer, api: str, mode: str
) -> None:
    usage = {"input_tokens": 40, "output_tokens": 9, "cached_tokens": 32, "reasoning_tokens": 5}
    calls = [("call_a", "add", '{"a": 1, "b": 2}'), ("call_b", "add", '{"a": 30, "b": 12}')]
    openai_server.script([reply("Adding both pairs now.", calls, usage=usage)])
    model = _model(openai_server, api)
    assert isinstance(model, StreamingModelClient) and isinstance(model, ModelClient)

    response = _answer(
        model, _request(UserMessage(content="add"), tools=(ADD_TOOL,)), mode, _ignore
    )

    assert response == ModelResponse(
        text="Adding both pairs now.",
        tool_calls=(
            ToolCall(id="call_a", name="add", arguments='{"a": 1, "b": 2}'),
            ToolCall(id="call_b", name="add", arguments='{"a": 30, "b": 12}'),
        ),
        usage=Usage(
            input_tokens=40, output_tokens=9, total_tokens=49, cached_tokens=32, reasoning_tokens=5
        ),
    )
    (sent,) = openai_server.requests()
    streamed = mode.endswith("stream")
    assert sent.body.get("stream", False) is streamed
    if api == "chat" and streamed:
        assert sent.body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_negative_token_counts_read_as_none(
    openai_server: OpenAIServer, api: str, mode: str
) -> None:
    """A server reporting ``-1000000`` input tokens drove a run's usage, its cost and its
    tenant's day negative, so later runs spent under every budget unrefused."""
    usage = {"input_tokens": -1_000_000, "output_tokens": 9, "cached_tokens": -5}
    openai_server.script([reply("hi", usage=usage)])

    response = _answer(
        _model(openai_server, api), _request(UserMessage(content="x")), mode, _ignore
    )

    assert response.usage == Usage(input_tokens=0, output_tokens=9, total_tokens=9)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("api", APIS)
def test_stream_hands_out_text_and_tool_argument_pieces_as_they_arrive(
    openai_server: OpenAIServer, api: str, asynchronous: bool
) -> None:
    arguments = '{"a": 123456, "b": 654321}'
    openai_server.script(
        [reply("The sum follows.", [("call_s", "add", arguments), ("call_t", "add", "{}")])]
    )
    pieces: list[ModelDelta] = []
    mode = "astream" if asynchronous else "stream"
    response = _answer(
        _model(openai_server, api), _request(UserMessage(content="go")), mode, pieces.append
    )

    texts = [p.text for p in pieces if p.kind == "text"]
    assert len(texts) > 1 and "".join(texts) == response.text == "The sum follows."
    for index, call in enumerate(response.tool_calls):
        mine = [p for p in pieces if p.kind == "tool_arguments" and p.call_index == index]
        assert len(mine) > (1 if index == 0 else 0)
        assert "".join(p.text for p in mine) == call.arguments
        # the call's id and name come with its first piece, and only with it
        assert (mine[0].call_id, mine[0].tool_name) == (call.id, "add")
        assert all(p.call_id is None and p.tool_name is None for p in mine[1:])
    assert [c.id for c in response.tool_calls] == ["call_s", "call_t"]


def test_async_calls_work_from_one_event_loop_after_another(openai_server: OpenAIServer) -> None:
    """A judge scorer may call ``asyncio.run`` per case: each loop gets its own HTTP pool."""
    openai_server.script(["first", "second", "third"])
    model = _model(openai_server, "chat")
    assert isinstance(model, OpenAIChatModel)
    request = _request(UserMessage(content="hi"))
    assert asyncio.run(model.acomplete(request)).text == "first"
    assert asyncio.run(model.acomplete(request)).text == "second"

    async def closing() -> str | None:
        async with model:
            return (await model.acomplete(request)).text

    assert asyncio.run(closing()) == "third"


def test_tool_call_ids_and_arguments_are_normalised(openai_server: OpenAIServer) -> None:
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "part one, "}, {"type": "text", "text": "two"}],
        "tool_calls": [
            {"id": "call_abc", "type": "function", "function": {"name": "add", "arguments": "{}"}},
            {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}},
            {"id": "", "type": "function", "function": {"name": "noop"}},
        ],
    }
    body = {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}
    openai_server.script([{"body": body}])  # no usage at all: zero
    response = _model(openai_server, "chat").complete(_request(UserMessage(content="hi")))
    assert response == ModelResponse(
        text="part one, two",
        tool_calls=(
            ToolCall(id="call_abc", name="add", arguments="{}"),
            ToolCall(id="call_1", name="add", arguments='{"a": 2, "b": 3}'),
            ToolCall(id="call_2", name="noop", arguments="{}"),
        ),
        usage=Usage(),
    )


@pytest.mark.parametrize(
    ("api", "body", "expected"),
    [
        ("chat", {"object": "list", "data": []}, "no choices"),
        ("chat", {"choices": [{"index": 0}]}, r"no choices\[0\]\.message"),
        (
            "chat",
            {"choices": [{"message": {"tool_calls": [{"id": "x", "function": {}}]}}]},
            r"tool_calls\[0\] has no function name",
        ),
        ("responses", {"id": "r", "object": "response"}, "no output list"),
        (
            "responses",
            {"output": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]},
            "function_call #0 has no name",
        ),
    ],
)
def test_unusable_answers_raise_model_error_quoting_them(
    openai_server: OpenAIServer, api: str, body: dict[str, Any], expected: str
) -> None:
    openai_server.script([{"body": body}])
    with pytest.raises(ModelError, match=expected) as info:
        _model(openai_server, api).complete(_request(UserMessage(content="hi")))
    assert "malformed answer" in str(info.value) and info.value.excerpt
    assert len(openai_server.requests()) == 1  # a bad 2xx answer is not retried


def test_tool_loop_sends_the_tool_result_back(openai_server: OpenAIServer) -> None:
    openai_server.script([ModelResponse.call("c1", "add", {"a": 1, "b": 2}), "the sum is 3"])
    model = _model(openai_server, "chat")
    user = UserMessage(content="add 1 and 2")
    first = model.complete(_request(user, tools=(ADD_TOOL,)))
    assert first.tool_calls == (ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}'),)
    items = (user, *first.items_for_memory(), ToolOutput(call_id="c1", name="add", output="3"))
    assert model.complete(_request(*items, tools=(ADD_TOOL,))).text == "the sum is 3"
    assert openai_server.requests()[1].messages[-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "3",
    }


def test_a_server_that_cannot_start_says_why() -> None:
    from tests.support.openai_fixture import start_openai_server

    with pytest.raises(
        RuntimeError, match=r"did not start (?s:.*)no API key; set OPENAI_SERVER_API_KEY"
    ):
        start_openai_server("")
