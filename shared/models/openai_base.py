"""What both OpenAI model clients share: the endpoint, the SDK clients, error translation.

:class:`OpenAIModel` holds an :class:`~tether.models.openai_client.OpenAIEndpoint` and builds
the SDK's clients on first use: one ``openai.OpenAI`` for :meth:`complete`/``stream`` (thread
safe, shared by the threads of a worker), and one ``openai.AsyncOpenAI`` per event loop for the
``a``-prefixed twins (an asyncio HTTP pool belongs to the loop that opened it, so a client
reused on another loop would fail).

Every SDK failure leaves as a :class:`~tether.errors.ModelError`, raised outside the ``except``
block that caught it (no SDK exception, which holds the HTTP request, chained onto it).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Self, TypeVar

import openai
from pydantic import SecretStr

from tether.core.events import Usage
from tether.errors import ModelError
from tether.models.base import DeltaSink, ModelDelta, ModelResponse, with_billed_usage
from tether.models.openai_client import DEFAULT_BASE_URL, AzureTarget, OpenAIEndpoint
from tether.models.openai_mapping import MalformedAnswer, quote

if TYPE_CHECKING:
    from tether.settings import Settings

T = TypeVar("T")
A = TypeVar("A")
#: What unvalidated SDK objects raise when a server sent the wrong shape.
_SHAPE_ERRORS = (MalformedAnswer, AttributeError, TypeError, KeyError, IndexError)


class OpenAIModel:
    """The shared part of :class:`~tether.models.openai_chat.OpenAIChatModel` and
    :class:`~tether.models.openai_responses.OpenAIResponsesModel`.

    Args:
        base_url: the API root including the version prefix, e.g. ``https://api.openai.com/v1``
            or ``http://localhost:11434/v1`` (Ollama).
        api_key: the key (None: none; see :data:`~tether.models.openai_client.NO_KEY`).
        timeout_s: the timeout of one request (each retry gets its own).
        max_retries: the SDK's retries of 408/409/429/5xx answers, timeouts and connection
            errors (0: one attempt).
        extra_headers: headers added to every request.
        azure: send to this Azure OpenAI deployment instead of ``base_url``.

    Raises:
        ConfigurationError: a bad URL, timeout or retry budget.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        api_key: SecretStr | str | None = None,
        *,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        extra_headers: Mapping[str, str] | None = None,
        azure: AzureTarget | None = None,
    ) -> None:
        key = SecretStr(api_key) if isinstance(api_key, str) else api_key
        headers = dict(extra_headers or {})
        self._setup(OpenAIEndpoint(base_url, key, timeout_s, max_retries, headers, azure))

    def _setup(self, endpoint: OpenAIEndpoint) -> None:
        self.endpoint = endpoint
        self._errors = endpoint.error_context()
        self._lock = threading.Lock()
        self._client: openai.OpenAI | None = None
        # one per event loop, dropped with its loop (see _async_sdk)
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )

    @classmethod
    def for_endpoint(cls, endpoint: OpenAIEndpoint) -> Self:
        """A client of ``endpoint``."""
        model = cls.__new__(cls)
        model._setup(endpoint)
        return model

    def surfacing_rate_limits(self) -> Self:
        """A client of the same endpoint on which the SDK does not retry 429s: each reaches
        the caller at once (a :class:`~tether.runs.limits.gate.BudgetedModel` then pauses the
        model for the whole fleet); other failures keep the SDK's retries."""
        if not self.endpoint.retry_rate_limits:
            return self
        return self.for_endpoint(self.endpoint.surfacing_rate_limits())

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> Self:
        """A client of the endpoint ``TETHER_OPENAI_*`` configures (read now when not given)."""
        if settings is None:
            from tether.settings import load_settings

            settings = load_settings()
        return cls.for_endpoint(OpenAIEndpoint.from_settings(settings))

    @property
    def timeout_s(self) -> float:
        """The timeout of one request."""
        return self.endpoint.timeout_s

    @property
    def max_retries(self) -> int:
        """The SDK's retry budget."""
        return self.endpoint.max_retries

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.endpoint!r})"

    __str__ = __repr__

    # --- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the synchronous client's connections (the next call opens new ones)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    async def aclose(self) -> None:
        """Close the connections of the asyncio client of the running loop."""
        with self._lock:
            client = self._async.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _sdk(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                self._client = self.endpoint.sync_client()
            return self._client

    def _async_sdk(self) -> openai.AsyncOpenAI:
        # An asyncio connection pool belongs to the loop that opened it: each loop gets its
        # own client (whose HTTP client has no finalizer scheduling a close on whatever loop
        # runs when it is collected: see OpenAIEndpoint.async_client).
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async.get(loop)
            if client is None:
                client = self._async[loop] = self.endpoint.async_client()
            return client

    # --- calls, each failure one ModelError -------------------------------------------------------

    def _call(self, send: Callable[[openai.OpenAI], T]) -> T:
        client = self._sdk()
        failure: ModelError
        try:
            return send(client)
        except openai.OpenAIError as exc:
            failure = self._errors.translate(exc)
        except ValueError as exc:  # a 2xx body that is not JSON
            failure = self._unreadable("answer", exc)
        raise failure

    async def _acall(self, send: Callable[[openai.AsyncOpenAI], Awaitable[T]]) -> T:
        client = self._async_sdk()
        failure: ModelError
        try:
            return await send(client)
        except openai.OpenAIError as exc:
            failure = self._errors.translate(exc)
        except ValueError as exc:
            failure = self._unreadable("answer", exc)
        raise failure

    def _next(self, events: Iterator[T]) -> T | None:
        """The stream's next event (None at its end)."""
        failure: ModelError
        try:
            return next(events)
        except StopIteration:
            return None
        except openai.OpenAIError as exc:
            failure = self._errors.translate(exc)
        except ValueError as exc:  # json.JSONDecodeError: a chunk that is not JSON
            failure = self._unreadable("stream chunk", exc)
        raise failure

    async def _anext(self, events: AsyncIterator[T]) -> T | None:
        failure: ModelError
        try:
            return await anext(events)
        except StopAsyncIteration:
            return None
        except openai.OpenAIError as exc:
            failure = self._errors.translate(exc)
        except ValueError as exc:
            failure = self._unreadable("stream chunk", exc)
        raise failure

    def _pump(
        self, stream: openai.Stream[A], add: Callable[[A], list[ModelDelta]], on_delta: DeltaSink
    ) -> int:
        """Hand ``on_delta`` the pieces ``add`` makes of each event of ``stream``, then close it
        (also when a piece fails or the sink raises); how many events came."""
        count = 0
        try:
            events = iter(stream)
            while (event := self._next(events)) is not None:
                count += 1
                for delta in self._read(add, event, "stream chunk"):
                    on_delta(delta)
        finally:
            stream.close()
        return count

    async def _apump(
        self,
        stream: openai.AsyncStream[A],
        add: Callable[[A], list[ModelDelta]],
        on_delta: DeltaSink,
    ) -> int:
        """:meth:`_pump` on asyncio."""
        count = 0
        try:
            events = aiter(stream)
            while (event := await self._anext(events)) is not None:
                count += 1
                for delta in self._read(add, event, "stream chunk"):
                    on_delta(delta)
        finally:
            await stream.close()
        return count

    def _with_content(self, answer: ModelResponse, events: int) -> ModelResponse:
        """``answer`` of a streamed call, unless it holds neither text nor a tool call: then a
        :class:`ModelError` (carrying the tokens billed), so that the run fails and says why
        instead of completing with no output."""
        if answer.text or answer.tool_calls:
            return answer
        failure = self._errors.empty_stream(events)
        with_billed_usage(failure, answer.usage)
        raise failure

    def _read(
        self,
        parse: Callable[[A], T],
        answer: A,
        what: str,
        usage: Callable[[A], Usage] | None = None,
    ) -> T:
        """``parse(answer)``, a :class:`ModelError` quoting ``answer`` when it has the wrong
        shape. With ``usage`` (how to read the tokens the provider reported in ``answer``), the
        error carries them (:func:`~tether.models.base.billed_usage`): an answer the client
        cannot use was billed all the same."""
        failure: ModelError
        try:
            return parse(answer)
        except _SHAPE_ERRORS as exc:
            problem = str(exc) if isinstance(exc, MalformedAnswer) else f"{type(exc).__name__}"
            failure = self._errors.malformed(what, quote(answer), problem)
        if usage is not None:
            with_billed_usage(failure, _reported(usage, answer))
        raise failure

    def _unreadable(self, what: str, exc: ValueError) -> ModelError:
        doc = getattr(exc, "doc", None)  # a JSONDecodeError keeps the text it could not read
        problem = getattr(exc, "msg", None) or type(exc).__name__
        return self._errors.malformed(what, doc if isinstance(doc, str) else "", str(problem))


def _reported(usage: Callable[[A], Usage], answer: A) -> Usage:
    """The tokens ``answer`` reports (none when its usage cannot be read either)."""
    try:
        return usage(answer)
    except (*_SHAPE_ERRORS, ValueError):  # a usage of the wrong shape is no usage
        return Usage()
