"""Failures of the SDK-backed model clients against a real server process: every one is a
ModelError naming the status, the request id, an excerpt and the fix; retries are the SDK's,
within TETHER_OPENAI_MAX_RETRIES and TETHER_OPENAI_TIMEOUT_S; the API key is never shown.

The server (tests/support/openai_server.py) is hostile on purpose: its 401 echoes the key it
received, and its malformed chunk quotes it too.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import traceback
from typing import Any

import pytest
from pydantic import SecretStr

from tests.support.openai_fixture import OpenAIServer, reply
from tether.core.items import UserMessage
from tether.errors import ConfigurationError, ModelError
from tether.models.base import ModelDelta, ModelRequest
from tether.models.openai import OpenAIChatModel, OpenAIClient, OpenAIResponsesModel

APIS = {"chat": OpenAIChatModel, "responses": OpenAIResponsesModel}
REQUEST = ModelRequest(model="test-model", items=(UserMessage(content="hi"),))


def _model(server: OpenAIServer, api: str = "chat", **kwargs: Any) -> OpenAIClient:
    kwargs.setdefault("timeout_s", 10.0)
    return APIS[api](server.base_url, server.api_key, **kwargs)


def _complete(model: OpenAIClient) -> Any:
    return model.complete(REQUEST)


def _everything_about(exc: BaseException) -> str:
    """Every text a log, a result or an error report could show of ``exc``."""
    parts = ["".join(traceback.format_exception(exc)), repr(exc), str(exc)]
    parts += [repr(value) for value in vars(exc).values()]
    return "\n".join(parts)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- retries ------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_429_with_retry_after_is_waited_out_then_succeeds(
    openai_server: OpenAIServer, api: str
) -> None:
    openai_server.fail_next(1, 429, retry_after_s=0.6, message="slow down")
    openai_server.script(["made it"])
    started = time.monotonic()
    assert _complete(_model(openai_server, api)).text == "made it"
    # the SDK's own backoff starts at 0.5 s minus up to 25%: only the header explains 0.6 s
    assert time.monotonic() - started >= 0.6
    assert [r.status for r in openai_server.model_requests()] == [429, 200]


def test_500s_are_retried_by_the_sdk_up_to_max_retries(openai_server: OpenAIServer) -> None:
    openai_server.fail_next(2, 500, retry_after_s=0.01)
    openai_server.script(["recovered"])
    assert _complete(_model(openai_server, max_retries=2)).text == "recovered"
    assert [r.status for r in openai_server.model_requests()] == [500, 500, 200]


def test_500s_beyond_max_retries_raise_model_error_with_status_request_id_and_excerpt(
    openai_server: OpenAIServer,
) -> None:
    openai_server.fail_next(3, 502, retry_after_s=0.01, message="upstream   exploded\n" + "x" * 500)
    openai_server.script(["never reached"])
    with pytest.raises(ModelError) as info:
        _complete(_model(openai_server, max_retries=2))
    error = info.value
    requests = openai_server.model_requests()
    assert [r.status for r in requests] == [502, 502, 502]
    assert error.status == 502 and error.request_id == requests[-1].request_id
    assert error.excerpt.startswith("upstream exploded xxx") and len(error.excerpt) <= 200
    message = str(error)
    assert f"HTTP 502 (request id {requests[-1].request_id}) after 3 attempts" in message
    assert "TETHER_OPENAI_MAX_RETRIES" in message and len(message) < 600


def test_zero_retries_means_one_attempt(openai_server: OpenAIServer) -> None:
    openai_server.fail_next(1, 500)
    with pytest.raises(ModelError, match="HTTP 500"):
        _complete(_model(openai_server, max_retries=0))
    assert len(openai_server.model_requests()) == 1


@pytest.mark.parametrize(
    ("status", "fix"),
    [(400, "tool schemas"), (404, "TETHER_OPENAI_BASE_URL"), (422, "tool schemas")],
)
def test_client_errors_are_not_retried_and_say_what_to_check(
    openai_server: OpenAIServer, status: int, fix: str
) -> None:
    openai_server.script([reply(status=status, message="bad request body")])
    with pytest.raises(ModelError, match=f"HTTP {status} .*: bad request body; .*{fix}") as info:
        _complete(_model(openai_server))
    assert info.value.status == status
    assert len(openai_server.model_requests()) == 1


# --- timeouts and connections ---------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_a_slow_answer_hits_timeout_s_and_is_retried_then_fails(
    openai_server: OpenAIServer, api: str
) -> None:
    openai_server.script([reply("late", delay_s=3.0)] * 2)
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"timed out after 0\.3s \(2 attempts\)") as info:
        _complete(_model(openai_server, api, timeout_s=0.3, max_retries=1))
    # two attempts of 0.3 s and one backoff (under 1 s): the server's 3 s never waited out
    assert time.monotonic() - started < 2.5
    assert len(openai_server.model_requests()) == 2
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert "TETHER_OPENAI_TIMEOUT_S" in str(info.value)


@pytest.mark.parametrize("api", APIS)
def test_a_stalled_stream_hits_timeout_s(openai_server: OpenAIServer, api: str) -> None:
    openai_server.script([reply("one two three four five six", chunk_delay_s=0.2)])
    model = _model(openai_server, api, timeout_s=0.1, max_retries=0)
    pieces: list[ModelDelta] = []
    with pytest.raises(ModelError, match=r"timed out after 0\.1s"):
        model.stream(REQUEST, pieces.append)
    assert len(openai_server.model_requests()) == 1  # a started stream is not retried


def test_a_slow_stream_within_timeout_s_completes(openai_server: OpenAIServer) -> None:
    """The timeout bounds each read, not the whole answer: a long generation that keeps
    sending is not cut off."""
    openai_server.script([reply("a slow but steady answer", chunk_delay_s=0.05)])
    model = _model(openai_server, "chat", timeout_s=0.3, max_retries=0)
    assert isinstance(model, OpenAIChatModel)
    started = time.monotonic()
    assert model.stream(REQUEST, lambda _: None).text == "a slow but steady answer"
    assert time.monotonic() - started > 0.3


def test_connection_refused_raises_model_error_after_retries() -> None:
    key = "sk-unreachable-" + "k" * 20
    model = OpenAIChatModel(f"http://127.0.0.1:{_free_port()}/v1", key, max_retries=1)
    with pytest.raises(ModelError, match=r"could not be reached .*2 attempts") as info:
        model.complete(REQUEST)
    assert "TETHER_OPENAI_BASE_URL" in str(info.value)
    assert key not in _everything_about(info.value)


# --- malformed answers --------------------------------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("api", APIS)
def test_a_malformed_chunk_fails_the_stream_quoting_it_without_the_key(
    openai_server: OpenAIServer, api: str, asynchronous: bool
) -> None:
    openai_server.script([reply("several words of text", malformed=True)])
    model = _model(openai_server, api)
    pieces: list[ModelDelta] = []
    with pytest.raises(ModelError) as info:
        if asynchronous:
            asyncio.run(model.astream(REQUEST, pieces.append))
        else:
            model.stream(REQUEST, pieces.append)
    error = info.value
    assert "malformed stream chunk" in str(error)
    assert "MALFORMED key=***" in error.excerpt and error.excerpt in str(error)
    assert openai_server.api_key not in _everything_about(error)
    assert error.__context__ is None
    assert [p.text for p in pieces] == ["sever"]  # handed out before it; void now


@pytest.mark.parametrize("api", APIS)
def test_an_error_in_the_middle_of_a_stream_fails_it_without_the_key(
    openai_server: OpenAIServer, api: str
) -> None:
    key = openai_server.api_key
    openai_server.script([reply("several words", midstream_error=f"overloaded; key {key}")])
    model = _model(openai_server, api)
    with pytest.raises(ModelError, match=r"overloaded; key \*\*\*") as info:
        model.stream(REQUEST, lambda _: None)
    assert key not in _everything_about(info.value)
    assert info.value.__context__ is None


def test_a_body_that_is_not_json_fails_quoting_it_without_the_key(
    openai_server: OpenAIServer,
) -> None:
    openai_server.script([reply("unused", malformed=True)])
    with pytest.raises(ModelError, match="malformed answer") as info:
        _complete(_model(openai_server))
    assert "MALFORMED key=***" in str(info.value)
    assert openai_server.api_key not in _everything_about(info.value)


# --- the key ------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_401_is_not_retried_and_the_key_the_server_echoes_is_nowhere(
    openai_server: OpenAIServer, api: str
) -> None:
    wrong = "sk-wrong-" + "s3cr3t" * 4
    with pytest.raises(ModelError) as info:
        _complete(APIS[api](openai_server.base_url, SecretStr(wrong), max_retries=2))
    (sent,) = openai_server.model_requests()
    assert sent.status == 401
    error = info.value
    text = _everything_about(error)
    assert "HTTP 401" in text and "Incorrect API key provided: '***'" in text
    assert "check TETHER_OPENAI_API_KEY" in text
    assert (error.status, error.request_id) == (401, sent.request_id)
    assert wrong not in text and "s3cr3t" not in text and "Bearer" not in text
    assert error.__cause__ is None and error.__context__ is None


def test_401_on_the_async_client_is_scrubbed_too(openai_server: OpenAIServer) -> None:
    wrong = "sk-wrong-async-" + "z" * 24
    model = OpenAIResponsesModel(openai_server.base_url, wrong, max_retries=0)
    with pytest.raises(ModelError, match="HTTP 401") as info:
        asyncio.run(model.acomplete(REQUEST))
    assert wrong not in _everything_about(info.value)


@pytest.mark.parametrize("wrap", [SecretStr, str])
def test_the_key_is_not_in_repr_or_str(wrap: type) -> None:
    key = "sk-live-" + "z" * 32
    model = OpenAIChatModel(
        "https://user:pw@api.example.test/v1?token=q",
        wrap(key),
        extra_headers={"api-key": "hdr-secret-0451"},
    )
    for text in (repr(model), str(model), f"{model}", repr(vars(model))):
        assert key not in text and "hdr-secret-0451" not in text and "Bearer" not in text
    assert "pw" not in repr(model) and "token=q" not in repr(model)
    assert "api.example.test/v1" in repr(model)


def test_sdk_logs_at_debug_never_show_the_key(
    openai_server: OpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    openai_server.fail_next(1, 500, retry_after_s=0.01, message=f"echo {openai_server.api_key}")
    openai_server.script(["ok"])
    with caplog.at_level(logging.DEBUG):
        assert _complete(_model(openai_server)).text == "ok"
    lines = [record.getMessage() for record in caplog.records]
    assert any("Retrying" in line for line in lines), lines
    assert not [line for line in lines if openai_server.api_key in line or "Bearer" in line]


def test_credential_header_values_are_scrubbed(openai_server: OpenAIServer) -> None:
    token = "azure-" + "h" * 24
    openai_server.script([reply(status=403, message=f"key {token} has no access")])
    model = OpenAIChatModel(
        openai_server.base_url, openai_server.api_key, extra_headers={"api-key": token}
    )
    with pytest.raises(ModelError, match="HTTP 403") as info:
        model.complete(REQUEST)
    assert openai_server.requests()[0].headers["api-key"] == token
    assert token not in _everything_about(info.value)


def test_a_recorded_model_error_is_rebuilt_from_its_message() -> None:
    from tether.errors import error_from_record

    rebuilt = error_from_record("ModelError", "model endpoint ... answered HTTP 500")
    assert isinstance(rebuilt, ModelError)
    assert (rebuilt.status, rebuilt.request_id, rebuilt.excerpt) == (None, None, "")


def test_constructor_rejects_bad_settings() -> None:
    with pytest.raises(ConfigurationError, match="no scheme"):
        OpenAIChatModel("api.openai.com/v1", "k")
    with pytest.raises(ConfigurationError, match="max_retries"):
        OpenAIChatModel("http://127.0.0.1:1/v1", "k", max_retries=-1)
    with pytest.raises(ConfigurationError, match="timeout_s"):
        OpenAIResponsesModel("http://127.0.0.1:1/v1", "k", timeout_s=0)
