"""A streamed model call that brings no content (no text, no tool call) is a ModelError with a
clear message, on both APIs and both surfaces, against the test OpenAI server over HTTP: the
step fails instead of the run completing with ``output: null``. An answer with content, and an
unstreamed empty answer, are unchanged."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.openai_fixture import OpenAIServer, reply
from tether.core.items import UserMessage
from tether.errors import ModelError
from tether.models.base import ModelDelta, ModelRequest
from tether.models.openai import OpenAIChatModel, OpenAIResponsesModel

APIS = {"chat": OpenAIChatModel, "responses": OpenAIResponsesModel}
REQUEST = ModelRequest(model="test-model", items=(UserMessage(content="hello"),))


def _stream(server: OpenAIServer, api: str, asynchronous: bool) -> list[ModelDelta]:
    model = APIS[api](server.base_url, server.api_key, timeout_s=10.0)
    pieces: list[ModelDelta] = []
    if asynchronous:
        asyncio.run(model.astream(REQUEST, pieces.append))
    else:
        model.stream(REQUEST, pieces.append)
    return pieces


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "asyncio"])
@pytest.mark.parametrize("api", sorted(APIS))
def test_a_stream_without_content_is_a_model_error(
    openai_server: OpenAIServer, api: str, asynchronous: bool
) -> None:
    openai_server.script([reply(None)])
    with pytest.raises(ModelError, match="without any text or tool call") as caught:
        _stream(openai_server, api, asynchronous)
    assert openai_server.api_key not in str(caught.value)
    assert "TETHER_DELTA_MAX_LEN=0" in str(caught.value)


@pytest.mark.parametrize("api", sorted(APIS))
def test_a_stream_with_content_still_answers(openai_server: OpenAIServer, api: str) -> None:
    openai_server.script(["hi there"])
    assert "".join(p.text for p in _stream(openai_server, api, False)) == "hi there"
