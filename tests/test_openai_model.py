"""OpenAIChatModel against a real local HTTP server (tests/support/fake_openai.py)."""

from __future__ import annotations

import email.utils
import json
import logging
import socket
import time
import traceback
from collections.abc import Iterator
from types import MappingProxyType

import pytest
from pydantic import SecretStr

from tests.support.fake_openai import FakeOpenAI, FakeReply, completion_body
from tether.core.events import Usage
from tether.core.items import (
    AssistantMessage,
    Reasoning,
    ToolCall,
    ToolCallsMessage,
    ToolOutput,
    UserMessage,
)
from tether.errors import ConfigurationError, ModelError
from tether.models.base import ModelClient, ModelRequest, ModelResponse, ToolSpec
from tether.models.openai import OpenAIChatModel, retry_after_s

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


def _request(*items: object, **kwargs: object) -> ModelRequest:
    return ModelRequest(model="fake-model", items=tuple(items), **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def model(fake_openai: FakeOpenAI) -> Iterator[OpenAIChatModel]:
    client = OpenAIChatModel(
        fake_openai.base_url,
        SecretStr(fake_openai.api_key),
        timeout_s=5.0,
        retry_backoff_s=0.01,
    )
    yield client
    client.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _everything_about(exc: BaseException) -> str:
    """Every text a log or error report could show for ``exc``, chained ones included."""
    return "".join(traceback.format_exception(exc)) + repr(exc) + str(exc)


# --- request mapping ----------------------------------------------------------------------------


def test_request_maps_system_summary_and_every_item_type(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake_openai.script(["ok"])
    calls = (
        ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}'),
        ToolCall(id="c2", name="add", arguments='{"a": 3, "b": 4}'),
    )
    request = _request(
        UserMessage(content="add things"),
        Reasoning(text="private thoughts"),
        ToolCallsMessage(content="", tool_calls=calls),
        ToolOutput(call_id="c1", name="add", output="3"),
        ToolOutput(call_id="c2", name="add", output="7"),
        ToolCallsMessage(content="one more", tool_calls=(ToolCall(id="c3", name="add"),)),
        ToolOutput(call_id="c3", output="0"),
        AssistantMessage(content="3 and 7"),
        UserMessage(content="thanks"),
        system_prompt="You add numbers.",
        summary="The user likes sums.",
        tools=(ADD_TOOL,),
        parallel_tool_calls=True,
    )

    model.complete(request)

    (sent,) = fake_openai.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.body["model"] == "fake-model"
    assert sent.messages == [
        {"role": "system", "content": "You add numbers."},
        {"role": "system", "content": "Summary of earlier conversation:\nThe user likes sums."},
        {"role": "user", "content": "add things"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "tool", "tool_call_id": "c2", "content": "7"},
        {
            "role": "assistant",
            "content": "one more",
            "tool_calls": [
                {"id": "c3", "type": "function", "function": {"name": "add", "arguments": "{}"}}
            ],
        },
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
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                },
            },
        }
    ]
    assert sent.body["parallel_tool_calls"] is True


def test_request_without_tools_system_or_summary_sends_only_items(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake_openai.script(["ok"])
    model.complete(_request(UserMessage(content="hi"), parallel_tool_calls=True))

    (sent,) = fake_openai.requests
    assert sent.messages == [{"role": "user", "content": "hi"}]
    assert "tools" not in sent.body
    assert "parallel_tool_calls" not in sent.body


def test_parallel_tool_calls_false_is_sent_when_tools_exist(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake_openai.script(["ok"])
    model.complete(_request(UserMessage(content="hi"), tools=(ADD_TOOL,)))
    assert fake_openai.requests[0].body["parallel_tool_calls"] is False


def test_headers_carry_bearer_key_and_extra_headers(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(["ok"])
    with OpenAIChatModel(
        fake_openai.base_url + "/",  # a trailing slash must not produce //chat/completions
        fake_openai.api_key,
        extra_headers={"OpenAI-Organization": "org-test"},
    ) as client:
        assert client.complete(_request(UserMessage(content="hi"))).text == "ok"
    headers = fake_openai.requests[0].headers
    assert fake_openai.requests[0].path == "/v1/chat/completions"
    assert headers["authorization"] == f"Bearer {fake_openai.api_key}"
    assert headers["openai-organization"] == "org-test"
    assert headers["content-type"] == "application/json"


def test_no_api_key_sends_no_authorization_header(fake_openai: FakeOpenAI) -> None:
    fake_openai.require_auth = False
    fake_openai.script(["ok"])
    with OpenAIChatModel(fake_openai.base_url, None) as client:
        client.complete(_request(UserMessage(content="hi")))
    assert "authorization" not in fake_openai.requests[0].headers


# --- response parsing ---------------------------------------------------------------------------


def test_text_answer_and_usage(fake_openai: FakeOpenAI, model: OpenAIChatModel) -> None:
    fake_openai.script([completion_body("hello", prompt_tokens=21, completion_tokens=4)])
    response = model.complete(_request(UserMessage(content="hi")))
    assert response == ModelResponse(
        text="hello", usage=Usage(input_tokens=21, output_tokens=4, total_tokens=25)
    )
    assert isinstance(model, ModelClient)


def test_tool_calls_are_parsed_with_generated_ids_and_string_arguments(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    raw_calls = [
        {"id": "call_abc", "type": "function", "function": {"name": "add", "arguments": '{"a":1}'}},
        {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}},
        {"id": "", "type": "function", "function": {"name": "noop"}},
    ]
    body = completion_body(None, raw_calls)
    body["usage"] = {"prompt_tokens": 5, "completion_tokens": 2}  # no total: summed
    fake_openai.script([body])

    response = model.complete(_request(UserMessage(content="hi"), tools=(ADD_TOOL,)))

    assert response.text is None
    assert response.tool_calls == (
        ToolCall(id="call_abc", name="add", arguments='{"a":1}'),
        ToolCall(id="call_1", name="add", arguments='{"a": 2, "b": 3}'),
        ToolCall(id="call_2", name="noop", arguments="{}"),
    )
    assert response.usage == Usage(input_tokens=5, output_tokens=2, total_tokens=7)


def test_content_parts_and_missing_usage(fake_openai: FakeOpenAI, model: OpenAIChatModel) -> None:
    body = completion_body(None)
    body["choices"][0]["message"]["content"] = [
        {"type": "text", "text": "part one, "},
        {"type": "text", "text": "part two"},
    ]
    del body["usage"]
    fake_openai.script([body])
    response = model.complete(_request(UserMessage(content="hi")))
    assert response.text == "part one, part two"
    assert response.usage == Usage()


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (FakeReply(raw=b"<html>gateway</html>"), "not JSON"),
        (FakeReply(body={"object": "list", "data": []}), "no choices"),
        (FakeReply(body={"error": {"message": "model overloaded"}}), "model overloaded"),
        (FakeReply(body={"choices": [{"index": 0}]}), "choices[0].message"),
        (
            FakeReply(body=completion_body(None, [{"id": "x", "function": {"arguments": "{}"}}])),
            "tool_calls[0] has no function name",
        ),
    ],
)
def test_unusable_answers_raise_model_error(
    fake_openai: FakeOpenAI, model: OpenAIChatModel, reply: FakeReply, expected: str
) -> None:
    fake_openai.script([reply])
    with pytest.raises(ModelError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        model.complete(_request(UserMessage(content="hi")))
    assert len(fake_openai.requests) == 1  # a bad 2xx answer is not retried


def test_tool_loop_sees_the_tool_result(fake_openai: FakeOpenAI, model: OpenAIChatModel) -> None:
    fake_openai.script([ModelResponse.call("c1", "add", {"a": 1, "b": 2}), "the sum is 3"])
    user = UserMessage(content="add 1 and 2")

    first = model.complete(_request(user, tools=(ADD_TOOL,)))
    assert first.tool_calls == (ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}'),)
    items = (user, *first.items_for_memory(), ToolOutput(call_id="c1", name="add", output="3"))
    second = model.complete(_request(*items, tools=(ADD_TOOL,)))

    assert second.text == "the sum is 3"
    assert fake_openai.requests[1].messages[-2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
    ]
    assert fake_openai.remaining == 0


# --- retries and errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 503, 429])
def test_transient_statuses_are_retried_then_succeed(
    fake_openai: FakeOpenAI, model: OpenAIChatModel, status: int
) -> None:
    fake_openai.fail_next(2, status)
    fake_openai.script(["recovered"])
    assert model.complete(_request(UserMessage(content="hi"))).text == "recovered"
    assert [r.status for r in fake_openai.requests] == [status, status, 200]


def test_retries_exhausted_raise_model_error_with_status_and_excerpt(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake_openai.fail_next(3, 502, message="upstream   exploded\n" + "x" * 500)
    fake_openai.script(["never reached"])
    with pytest.raises(ModelError) as info:
        model.complete(_request(UserMessage(content="hi")))
    message = str(info.value)
    assert "HTTP 502" in message
    assert "upstream exploded" in message
    assert "3 attempt(s)" in message
    assert len(message) < 600  # a short excerpt, not the whole body
    assert len(fake_openai.requests) == 3  # 1 + max_retries=2
    assert fake_openai.remaining == 1


def test_zero_retries_means_one_attempt(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next(1, 500)
    with (
        OpenAIChatModel(fake_openai.base_url, fake_openai.api_key, max_retries=0) as client,
        pytest.raises(ModelError, match="HTTP 500"),
    ):
        client.complete(_request(UserMessage(content="hi")))
    assert len(fake_openai.requests) == 1


def test_401_is_not_retried_and_never_shows_the_key(fake_openai: FakeOpenAI) -> None:
    wrong_key = "sk-wrong-" + "s3cr3t" * 4
    with OpenAIChatModel(fake_openai.base_url, SecretStr(wrong_key)) as client:
        with pytest.raises(ModelError) as info:
            client.complete(_request(UserMessage(content="hi")))
        # The fake server echoed the wrong key in its body; the client must have scrubbed it.
        assert fake_openai.requests[0].status == 401
        assert len(fake_openai.requests) == 1
        text = _everything_about(info.value)
        assert "HTTP 401" in text
        assert "Incorrect API key provided" in text
        assert "***" in text
        assert wrong_key not in text
        assert "s3cr3t" not in text
        assert "Bearer" not in text
        assert info.value.__cause__ is None and info.value.__context__ is None


@pytest.mark.parametrize("status", [400, 404, 422])
def test_client_errors_are_not_retried(
    fake_openai: FakeOpenAI, model: OpenAIChatModel, status: int
) -> None:
    fake_openai.script([FakeReply(status, {"error": {"message": "bad request body"}})])
    with pytest.raises(ModelError, match=f"HTTP {status}: bad request body"):
        model.complete(_request(UserMessage(content="hi")))
    assert len(fake_openai.requests) == 1


def test_timeout_is_retried_then_raises_model_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.script([FakeReply(body=completion_body("late"), delay_s=1.0)] * 2)
    with OpenAIChatModel(
        fake_openai.base_url,
        fake_openai.api_key,
        timeout_s=0.2,
        max_retries=1,
        retry_backoff_s=0.01,
    ) as client:
        started = time.monotonic()
        with pytest.raises(ModelError, match=r"timed out after 0\.2s") as info:
            client.complete(_request(UserMessage(content="hi")))
        elapsed_s = time.monotonic() - started
    assert len(fake_openai.requests) == 2
    assert elapsed_s < 1.0  # gave up on the client timeout, not the server's delay
    # No httpx exception (it holds the request and its Authorization header) rides along.
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert fake_openai.api_key not in _everything_about(info.value)


def test_connection_refused_raises_model_error_after_retries() -> None:
    key = "sk-unreachable-" + "k" * 20
    url = f"http://127.0.0.1:{_free_port()}/v1"
    with (
        OpenAIChatModel(url, key, max_retries=1, retry_backoff_s=0.01) as client,
        pytest.raises(ModelError, match="connection failed") as info,
    ):
        client.complete(_request(UserMessage(content="hi")))
    assert "2 attempt(s)" in str(info.value)
    assert key not in _everything_about(info.value)


def test_retry_after_header_is_honored(fake_openai: FakeOpenAI, model: OpenAIChatModel) -> None:
    fake_openai.fail_next(1, 429, retry_after="0.4")
    fake_openai.script(["ok"])
    started = time.monotonic()
    assert model.complete(_request(UserMessage(content="hi"))).text == "ok"
    # retry_backoff_s is 0.01, so only the header can explain a wait this long.
    assert time.monotonic() - started >= 0.4


@pytest.mark.timeout(10)  # an uncapped client would sleep for an hour
def test_retry_after_is_capped(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next(1, 503, retry_after="3600")
    fake_openai.script(["ok"])
    with OpenAIChatModel(
        fake_openai.base_url, fake_openai.api_key, max_retry_after_s=0.05
    ) as client:
        started = time.monotonic()
        assert client.complete(_request(UserMessage(content="hi"))).text == "ok"
        assert time.monotonic() - started < 2.0


def test_retry_after_parsing() -> None:
    future = email.utils.formatdate(time.time() + 30, usegmt=True)  # HTTP-date form
    assert retry_after_s({"retry-after": "2"}) == 2.0
    assert retry_after_s({"retry-after": "0.25"}) == 0.25
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    date_delay_s = retry_after_s({"retry-after": future})
    assert date_delay_s is not None and 25 < date_delay_s <= 31
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None


# --- secrets ------------------------------------------------------------------------------------


@pytest.mark.parametrize("wrap", [SecretStr, str])
def test_key_is_not_in_repr_or_str(wrap: type) -> None:
    key = "sk-live-" + "z" * 32
    client = OpenAIChatModel(
        "https://user:pw@api.example.test/v1?token=q",
        wrap(key),
        extra_headers={"api-key": "hdr-secret-0451"},
    )
    try:
        for text in (repr(client), str(client), f"{client}", repr(vars(client))):
            assert key not in text
            assert "Bearer" not in text
            assert "hdr-secret-0451" not in text
        assert "pw" not in repr(client) and "token=q" not in repr(client)
        assert "api.example.test/v1" in repr(client)
    finally:
        client.close()


def test_retry_logs_never_show_the_key(
    fake_openai: FakeOpenAI, model: OpenAIChatModel, caplog: pytest.LogCaptureFixture
) -> None:
    fake_openai.fail_next(1, 500, message=f"echo {fake_openai.api_key}")
    fake_openai.script(["ok"])
    with caplog.at_level(logging.DEBUG):
        model.complete(_request(UserMessage(content="hi")))
    assert any("retry 1/2" in r.getMessage() for r in caplog.records)
    for record in caplog.records:
        assert fake_openai.api_key not in record.getMessage()
        assert "Bearer" not in record.getMessage()


def test_sensitive_extra_header_values_are_scrubbed(fake_openai: FakeOpenAI) -> None:
    fake_openai.require_auth = False
    token = "azure-" + "h" * 24
    fake_openai.script([FakeReply(403, {"error": {"message": f"key {token} has no access"}})])
    with (
        OpenAIChatModel(fake_openai.base_url, None, extra_headers={"api-key": token}) as client,
        pytest.raises(ModelError, match="HTTP 403") as info,
    ):
        client.complete(_request(UserMessage(content="hi")))
    assert fake_openai.requests[0].headers["api-key"] == token
    assert token not in _everything_about(info.value)


def test_constructor_rejects_bad_settings() -> None:
    with pytest.raises(ConfigurationError, match="not an http"):
        OpenAIChatModel("api.openai.com/v1", "k")
    with pytest.raises(ConfigurationError, match="max_retries"):
        OpenAIChatModel("http://127.0.0.1:1/v1", "k", max_retries=-1)
    with pytest.raises(ConfigurationError, match="timeout_s"):
        OpenAIChatModel("http://127.0.0.1:1/v1", "k", timeout_s=0)
