"""The Responses API client: ``POST /responses`` through the official ``openai`` SDK.

Requests are stateless (``store=False``): Tether sends the session's projected items every time
and keeps its own memory, so nothing has to live on the provider's side. The system prompt goes
in ``instructions``. :meth:`OpenAIResponsesModel.stream` hands out
``response.output_text.delta`` and ``response.function_call_arguments.delta`` pieces and answers
from the ``response.completed`` event, so it equals what
:meth:`~OpenAIResponsesModel.complete` would answer.
"""

from __future__ import annotations

from typing import Any, Required, TypedDict

from openai.types.responses import FunctionToolParam, ResponseInputItemParam

from tether.core.events import Usage
from tether.models.base import DeltaSink, ModelDelta, ModelRequest, ModelResponse
from tether.models.openai_base import OpenAIModel
from tether.models.openai_errors import ErrorContext
from tether.models.openai_mapping import (
    MalformedAnswer,
    responses_input,
    responses_response,
    responses_tools,
    responses_usage,
)

#: Events that end a streamed response with one (``incomplete``: cut short, e.g. by
#: ``max_output_tokens``; what it holds is still the answer).
_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete"})


class _ResponsesParams(TypedDict, total=False):
    model: Required[str]
    input: Required[list[ResponseInputItemParam]]
    store: Required[bool]
    instructions: str
    tools: list[FunctionToolParam]
    parallel_tool_calls: bool


def responses_params(request: ModelRequest) -> _ResponsesParams:
    """The arguments of ``responses.create`` for ``request``."""
    params: _ResponsesParams = {
        "model": request.model,
        "input": responses_input(request),
        "store": False,
    }
    if request.system_prompt:
        params["instructions"] = request.system_prompt
    if request.tools:
        params["tools"] = responses_tools(request.tools)
        params["parallel_tool_calls"] = request.parallel_tool_calls
    return params


class OpenAIResponsesModel(OpenAIModel):
    """A :class:`~tether.models.base.StreamingModelClient` on the Responses API.

    Constructed like :class:`~tether.models.openai_chat.OpenAIChatModel`. Every method raises
    :class:`~tether.errors.ModelError` when the call fails or the answer is unusable.
    """

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request``; answer its output text and function calls."""
        params = responses_params(request)
        response = self._call(lambda c: c.responses.create(**params))
        return self._read(responses_response, response, "answer", _response_usage)

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        """:meth:`complete` on asyncio (``openai.AsyncOpenAI``)."""
        params = responses_params(request)
        response = await self._acall(lambda c: c.responses.create(**params))
        return self._read(responses_response, response, "answer", _response_usage)

    def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Answer ``request`` streamed, calling ``on_delta`` with each piece as it arrives."""
        params = responses_params(request)
        stream = self._call(lambda c: c.responses.create(**params, stream=True))
        assembly = _ResponsesAssembly(self._errors)
        events = self._pump(stream, assembly.add, on_delta)
        answer = self._read(
            _ResponsesAssembly.response, assembly, "stream", _ResponsesAssembly.reported
        )
        return self._with_content(answer, events)

    async def astream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """:meth:`stream` on asyncio; ``on_delta`` is called on the loop's thread."""
        params = responses_params(request)
        stream = await self._acall(lambda c: c.responses.create(**params, stream=True))
        assembly = _ResponsesAssembly(self._errors)
        events = await self._apump(stream, assembly.add, on_delta)
        answer = self._read(
            _ResponsesAssembly.response, assembly, "stream", _ResponsesAssembly.reported
        )
        return self._with_content(answer, events)


def _response_usage(response: Any) -> Usage:
    """The tokens a response reports, read apart from the rest of it: an answer the client
    cannot use still reports (and was billed for) them."""
    return responses_usage(getattr(response, "usage", None))


class _ResponsesAssembly:
    """The answer of a streamed response: pieces handed out as they come, the answer itself
    from the final ``response`` object."""

    def __init__(self, errors: ErrorContext) -> None:
        self.errors = errors
        self.final: Any = None
        self.call_of_output: dict[int, int] = {}

    def add(self, event: Any) -> list[ModelDelta]:
        """Take one event in; answer the pieces it brought.

        Raises:
            ModelError: an ``error`` or ``response.failed`` event, with the provider's message.
        """
        kind = event.type
        if kind == "error":
            raise self.errors.failed(f"{getattr(event, 'code', None)}: {event.message}")
        if kind == "response.failed":
            error = getattr(event.response, "error", None)
            raise self.errors.failed(
                f"{getattr(error, 'code', None)}: {getattr(error, 'message', None)}"
            )
        if kind == "response.output_text.delta":
            return [ModelDelta("text", _text(event.delta))] if event.delta else []
        if kind == "response.output_item.added" and getattr(event.item, "type", None) == (
            "function_call"
        ):
            index = self._call_index(event.output_index)
            item = event.item
            return [
                ModelDelta(
                    "tool_arguments",
                    _text(getattr(item, "arguments", "") or ""),
                    call_index=index,
                    call_id=getattr(item, "call_id", None),
                    tool_name=getattr(item, "name", None),
                )
            ]
        if kind == "response.function_call_arguments.delta":
            index = self._call_index(event.output_index)
            return [ModelDelta("tool_arguments", _text(event.delta), call_index=index)]
        if kind in _FINAL_EVENTS:
            self.final = event.response
        return []

    def _call_index(self, output_index: Any) -> int:
        if not isinstance(output_index, int):
            raise MalformedAnswer(f"output_index {output_index!r} is not an integer")
        return self.call_of_output.setdefault(output_index, len(self.call_of_output))

    def reported(self) -> Usage:
        """The tokens the final event reported (none without one)."""
        return _response_usage(self.final)

    def response(self) -> ModelResponse:
        """The whole answer, from the final event."""
        if self.final is None:
            raise MalformedAnswer("the stream ended without a response.completed event")
        return responses_response(self.final)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise MalformedAnswer(f"a delta of type {type(value).__name__}, not a string")
    return value
