"""The Chat Completions client: ``POST /chat/completions`` through the official ``openai`` SDK.

Works with OpenAI and any compatible server (vLLM, Ollama, llama.cpp, LiteLLM: give its
``base_url``) and with Azure OpenAI. :meth:`OpenAIChatModel.stream` asks for
``stream=True`` with ``stream_options={"include_usage": True}`` and hands each text piece and
each piece of a tool call's arguments to the sink as it arrives; the response it returns is
assembled from the stream and equals what :meth:`~OpenAIChatModel.complete` would answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Required, TypedDict

from openai.types.chat import (
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
    ChatCompletionStreamOptionsParam,
)

from tether.core.events import Usage
from tether.models.base import DeltaSink, ModelDelta, ModelRequest, ModelResponse
from tether.models.openai_base import OpenAIModel
from tether.models.openai_mapping import (
    MalformedAnswer,
    chat_messages,
    chat_response,
    chat_tools,
    chat_usage,
    content_text,
    tool_call,
)

_INCLUDE_USAGE: ChatCompletionStreamOptionsParam = {"include_usage": True}


class _ChatParams(TypedDict, total=False):
    model: Required[str]
    messages: Required[list[ChatCompletionMessageParam]]
    tools: list[ChatCompletionFunctionToolParam]
    parallel_tool_calls: bool


def chat_params(request: ModelRequest) -> _ChatParams:
    """The arguments of ``chat.completions.create`` for ``request``.

    ``tools`` and ``parallel_tool_calls`` are sent only with tools: several compatible servers
    reject ``parallel_tool_calls`` without them.
    """
    params: _ChatParams = {"model": request.model, "messages": chat_messages(request)}
    if request.tools:
        params["tools"] = chat_tools(request.tools)
        params["parallel_tool_calls"] = request.parallel_tool_calls
    return params


class OpenAIChatModel(OpenAIModel):
    """A :class:`~tether.models.base.StreamingModelClient` on the Chat Completions API.

    Construct it with ``OpenAIChatModel(base_url, api_key, timeout_s=..., max_retries=...)``,
    from settings with :meth:`from_settings`, or for an endpoint with :meth:`for_endpoint`
    (see :class:`~tether.models.openai_base.OpenAIModel` for the arguments).

    Every method raises :class:`~tether.errors.ModelError` when the call fails or the answer is
    unusable, the API key scrubbed from it.
    """

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` and answer its first choice."""
        params = chat_params(request)
        completion = self._call(lambda c: c.chat.completions.create(**params))
        return self._read(chat_response, completion, "answer", _completion_usage)

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        """:meth:`complete` on asyncio (``openai.AsyncOpenAI``)."""
        params = chat_params(request)
        completion = await self._acall(lambda c: c.chat.completions.create(**params))
        return self._read(chat_response, completion, "answer", _completion_usage)

    def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Answer ``request`` streamed, calling ``on_delta`` with each piece as it arrives."""
        params = chat_params(request)
        chunks = self._call(
            lambda c: c.chat.completions.create(
                **params, stream=True, stream_options=_INCLUDE_USAGE
            )
        )
        assembly = _ChatAssembly()
        events = self._pump(chunks, assembly.add, on_delta)
        answer = self._read(_ChatAssembly.response, assembly, "stream", _ChatAssembly.reported)
        return self._with_content(answer, events)

    async def astream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """:meth:`stream` on asyncio; ``on_delta`` is called on the loop's thread."""
        params = chat_params(request)
        chunks = await self._acall(
            lambda c: c.chat.completions.create(
                **params, stream=True, stream_options=_INCLUDE_USAGE
            )
        )
        assembly = _ChatAssembly()
        events = await self._apump(chunks, assembly.add, on_delta)
        answer = self._read(_ChatAssembly.response, assembly, "stream", _ChatAssembly.reported)
        return self._with_content(answer, events)


def _completion_usage(completion: Any) -> Usage:
    """The tokens a chat completion reports, read apart from the rest of it: an answer the
    client cannot use still reports (and was billed for) them."""
    return chat_usage(getattr(completion, "usage", None))


@dataclass
class _CallParts:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    announced: bool = False


class _ChatAssembly:
    """The answer built from ``chat.completion.chunk`` objects (first choice only)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, _CallParts] = {}
        self.usage = Usage()

    def add(self, chunk: ChatCompletionChunk) -> list[ModelDelta]:
        """Take one chunk in; answer the pieces it brought."""
        usage = getattr(chunk, "usage", None)
        if usage is not None:  # the last chunk, with include_usage: no choices
            self.usage = chat_usage(usage)
        choices = chunk.choices
        if not isinstance(choices, list):
            raise MalformedAnswer(f"choices of type {type(choices).__name__}")
        deltas: list[ModelDelta] = []
        for choice in choices:
            if getattr(choice, "index", 0) != 0:
                continue
            delta = choice.delta
            text = content_text(getattr(delta, "content", None))
            if text:
                self.text.append(text)
                deltas.append(ModelDelta("text", text))
            for piece in getattr(delta, "tool_calls", None) or []:
                deltas.append(self._call_piece(piece))
        return deltas

    def _call_piece(self, piece: Any) -> ModelDelta:
        index = piece.index
        if not isinstance(index, int) or isinstance(index, bool):
            raise MalformedAnswer(f"a tool call piece has index {index!r}, not an integer")
        parts = self.calls.setdefault(index, _CallParts())
        if piece.id:
            parts.id = piece.id
        function = piece.function
        if function is not None and function.name and not parts.name:
            parts.name = function.name
        arguments = (function.arguments if function is not None else None) or ""
        if not isinstance(arguments, str):
            raise MalformedAnswer(f"tool call {index} arguments of type {type(arguments).__name__}")
        parts.arguments.append(arguments)
        first, parts.announced = not parts.announced, True
        return ModelDelta(
            "tool_arguments",
            arguments,
            call_index=index,
            call_id=parts.id if first else None,
            tool_name=(parts.name or None) if first else None,
        )

    def reported(self) -> Usage:
        """The tokens the stream's last chunk reported (none before it came)."""
        return self.usage

    def response(self) -> ModelResponse:
        """The whole answer."""
        calls = []
        for position, (index, parts) in enumerate(sorted(self.calls.items())):
            if not parts.name:
                raise MalformedAnswer(f"streamed tool call {index} has no function name")
            calls.append(tool_call(parts.id, parts.name, "".join(parts.arguments), position))
        return ModelResponse(
            text="".join(self.text) or None, tool_calls=tuple(calls), usage=self.usage
        )
