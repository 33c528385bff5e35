"""A model client for any OpenAI-compatible ``/v1/chat/completions`` endpoint, over httpx.

``base_url`` follows the OpenAI SDK convention: it includes the API version prefix
(``https://api.openai.com/v1``, ``http://localhost:11434/v1``) and the client appends
``/chat/completions``.

Secrets: the API key is held as a pydantic :class:`~pydantic.SecretStr` and only unwrapped while
building the headers of one request. It never appears in ``repr``, exception messages or log
lines; error bodies echoed by a server are scrubbed of it before they reach a message, and
exceptions are raised outside the ``except`` block so no httpx request (which carries the
``Authorization`` header) is chained onto them.
"""

from __future__ import annotations

import email.utils
import functools
import json
import logging
import random
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import SecretStr

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
from tether.errors import ConfigurationError, ModelError
from tether.models.base import ModelRequest, ModelResponse, ToolSpec

logger = logging.getLogger(__name__)

SUMMARY_PREFIX = "Summary of earlier conversation:\n"
"""Prefix of the system message that carries ``ModelRequest.summary``."""

_EXCERPT_CHARS = 200
_MAX_BACKOFF_S = 8.0
_REDACTED = "***"
# Extra headers whose values are credentials too (Azure uses ``api-key``): scrubbed like the key.
_SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key"})
# 408 is a server-side timeout; 429 and 5xx are the documented transient answers.
_RETRY_STATUSES = frozenset({408, 429})


@dataclass(frozen=True)
class _Retryable:
    """A failed attempt that may be retried, and the delay the server asked for (if any)."""

    failure: str
    wait_s: float | None = None


class OpenAIChatModel:
    """A :class:`tether.models.base.ModelClient` for OpenAI-compatible chat-completion endpoints.

    Args:
        base_url: the API root including the version prefix, e.g. ``https://api.openai.com/v1``.
        api_key: the bearer token (None or empty: send no ``Authorization`` header, for local
            servers that need none).
        timeout_s: the per-attempt HTTP timeout (connect, read, write and pool).
        max_retries: extra attempts after a 408/429/5xx answer or a connection error/timeout.
        extra_headers: headers added to every request (e.g. an organisation id).
        transport: an httpx transport (tests, proxies); None uses httpx's default.
        retry_backoff_s: the first backoff delay; doubled per attempt, capped at 8 s, jittered.
        max_retry_after_s: the cap on a server's ``Retry-After`` delay.

    Raises:
        ModelError: from :meth:`complete` when the endpoint fails or answers something unusable.
    """

    def __init__(
        self,
        base_url: str,
        api_key: SecretStr | str | None,
        *,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        extra_headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        retry_backoff_s: float = 0.5,
        max_retry_after_s: float = 30.0,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"base_url {_safe_url(base_url)!r} is not an http(s) URL; "
                "pass e.g. 'https://api.openai.com/v1'"
            )
        if max_retries < 0:
            raise ConfigurationError(f"max_retries={max_retries} is negative; pass 0 or more")
        if timeout_s <= 0:
            raise ConfigurationError(f"timeout_s={timeout_s} must be positive; pass e.g. 60.0")
        self._base_url = base_url.rstrip("/")
        self._url = self._base_url + "/chat/completions"
        key = api_key if isinstance(api_key, SecretStr) else SecretStr(api_key or "")
        self._api_key: SecretStr | None = key if key.get_secret_value() else None
        # Credential-like header values stay wrapped too, so vars(client) shows no secret.
        self._extra_headers: dict[str, str | SecretStr] = {
            name: SecretStr(value) if name.lower() in _SENSITIVE_HEADERS else value
            for name, value in (extra_headers or {}).items()
        }
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.retry_backoff_s = retry_backoff_s
        self.max_retry_after_s = max_retry_after_s
        self._secrets = self._secret_values()
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout_s), transport=transport, verify=_ssl_context()
        )

    def __repr__(self) -> str:
        key = "None" if self._api_key is None else repr(self._api_key)  # SecretStr masks itself
        return (
            f"OpenAIChatModel(base_url={_safe_url(self._base_url)!r}, api_key={key}, "
            f"timeout_s={self.timeout_s}, max_retries={self.max_retries}, "
            f"extra_headers={sorted(self._extra_headers)})"
        )

    __str__ = __repr__

    def close(self) -> None:
        """Close the underlying HTTP connection pool."""
        self._http.close()

    def __enter__(self) -> OpenAIChatModel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` and parse the first choice.

        Raises:
            ModelError: on a non-retryable HTTP status, when retries are exhausted, or when the
                answer is not a usable chat completion.
        """
        body = build_request_body(request)
        data = self._post_with_retries(body)
        return parse_response_body(data, self._scrub)

    # --- HTTP -------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key is not None:
            headers["Authorization"] = "Bearer " + self._api_key.get_secret_value()
        for name, value in self._extra_headers.items():
            headers[name] = value.get_secret_value() if isinstance(value, SecretStr) else value
        return headers

    def _post_with_retries(self, body: dict[str, Any]) -> Any:
        attempts = self.max_retries + 1
        for attempt in range(1, attempts + 1):
            outcome = self._attempt(body)
            if not isinstance(outcome, _Retryable):
                return outcome
            if attempt == attempts:
                raise ModelError(
                    f"model endpoint {_safe_url(self._url)} {outcome.failure} "
                    f"(gave up after {attempts} attempt(s)); check that the endpoint is up and "
                    "reachable, or raise max_retries/timeout_s"
                )
            delay_s = self._delay_s(attempt, outcome.wait_s)
            logger.warning(
                "model endpoint %s %s; retry %d/%d in %.2fs",
                _safe_url(self._url),
                outcome.failure,
                attempt,
                self.max_retries,
                delay_s,
            )
            time.sleep(delay_s)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _attempt(self, body: dict[str, Any]) -> Any:
        """One POST: the decoded JSON, a :class:`_Retryable` failure, or raise ModelError."""
        fatal = ""
        try:
            response = self._http.post(self._url, json=body, headers=self._headers())
        except httpx.TimeoutException as exc:
            return _Retryable(f"timed out after {self.timeout_s}s ({type(exc).__name__})")
        except httpx.TransportError as exc:
            return _Retryable(
                f"connection failed ({type(exc).__name__}: {self._scrub(str(exc))})"
            )
        except httpx.HTTPError as exc:  # not transient: bad URL, too many redirects, ...
            fatal = f"request failed ({type(exc).__name__}: {self._scrub(str(exc))})"
        if fatal:
            # Raised outside the except block: the httpx error holds the request and its
            # Authorization header, so it must not ride along as __context__.
            raise ModelError(f"model endpoint {_safe_url(self._url)} {fatal}")
        status = response.status_code
        if status < 300:
            return self._decode(response)
        failure = f"answered HTTP {status}: {self._excerpt(response)}"
        if _is_retryable(status):
            return _Retryable(failure, retry_after_s(response.headers))
        raise ModelError(f"model endpoint {_safe_url(self._url)} {failure}; {_hint(status)}")

    def _delay_s(self, attempt: int, wait_s: float | None) -> float:
        if wait_s is not None:
            return min(max(wait_s, 0.0), self.max_retry_after_s)
        base_s = min(self.retry_backoff_s * 2.0 ** (attempt - 1), _MAX_BACKOFF_S)
        # Jitter spreads out workers that all hit the same overloaded endpoint at once.
        return base_s * random.uniform(0.8, 1.2)

    def _decode(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            excerpt = self._excerpt(response)
        raise ModelError(
            f"model endpoint {_safe_url(self._url)} answered HTTP {response.status_code} with a "
            f"body that is not JSON: {excerpt!r}; check that base_url points at an "
            "OpenAI-compatible API root (ending in /v1)"
        )

    def _excerpt(self, response: httpx.Response) -> str:
        text = response.text
        try:
            err = json.loads(text).get("error")
        except (ValueError, AttributeError):
            err = None
        if isinstance(err, Mapping) and isinstance(err.get("message"), str):
            text = err["message"]
        elif isinstance(err, str):
            text = err
        return _shorten(self._scrub(text))

    # --- secrets ----------------------------------------------------------------------------

    def _secret_values(self) -> tuple[SecretStr, ...]:
        values = [] if self._api_key is None else [self._api_key.get_secret_value()]
        for value in self._extra_headers.values():
            if isinstance(value, SecretStr):
                values.append(value.get_secret_value().removeprefix("Bearer ").strip())
        # Longest first so a secret containing another is replaced whole.
        ordered = sorted((v for v in values if v), key=len, reverse=True)
        return tuple(SecretStr(v) for v in ordered)

    def _scrub(self, text: str) -> str:
        """``text`` with every known secret replaced by ``***`` (for error excerpts)."""
        for secret in self._secrets:
            text = text.replace(secret.get_secret_value(), _REDACTED)
        return text


# --- request mapping --------------------------------------------------------------------------


def build_request_body(request: ModelRequest) -> dict[str, Any]:
    """The JSON body of a chat-completions request for ``request``.

    Order: the system prompt, then the summary as a second system message, then the items.
    Reasoning items are not sent. ``tools`` and ``parallel_tool_calls`` appear only when the
    request has tools (several servers reject ``parallel_tool_calls`` without tools).
    """
    messages: list[dict[str, Any]] = []
    if request.system_prompt:
        messages.append({"role": "system", "content": request.system_prompt})
    if request.summary:
        messages.append({"role": "system", "content": SUMMARY_PREFIX + request.summary})
    for item in request.items:
        message = item_to_message(item)
        if message is not None:
            messages.append(message)
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.tools:
        body["tools"] = [tool_to_json(spec) for spec in request.tools]
        body["parallel_tool_calls"] = request.parallel_tool_calls
    return body


def item_to_message(item: Item) -> dict[str, Any] | None:
    """The chat message for one memory item (None: the item is not sent)."""
    if isinstance(item, UserMessage):
        return {"role": "user", "content": item.content}
    if isinstance(item, AssistantMessage):
        return {"role": "assistant", "content": item.content}
    if isinstance(item, ToolCallsMessage):
        return {
            "role": "assistant",
            "content": item.content or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in item.tool_calls
            ],
        }
    if isinstance(item, ToolOutput):
        return {"role": "tool", "tool_call_id": item.call_id, "content": item.output}
    if isinstance(item, Reasoning):
        return None  # private to this runtime; chat-completions has no input slot for it
    raise ModelError(f"memory item of type {type(item).__name__} cannot be sent to the model")


def tool_to_json(spec: ToolSpec) -> dict[str, Any]:
    """The ``tools`` entry for one tool spec."""
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": _plain(spec.parameters),
        },
    }


def _plain(value: Any) -> Any:
    """Nested mappings/sequences as dicts/lists (json cannot encode e.g. MappingProxyType)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(v) for v in value]
    return value


# --- response parsing -------------------------------------------------------------------------


def parse_response_body(
    data: Any, scrub: Callable[[str], str] | None = None
) -> ModelResponse:
    """A :class:`ModelResponse` from a chat-completion JSON body (first choice only).

    Tool calls without an id get ``call_<index>``; ``arguments`` given as an object (some
    compatible servers do that) are re-encoded as JSON text.

    Raises:
        ModelError: the body has no usable ``choices[0].message``.
    """
    message = _first_message(data, scrub or _identity)
    text = _content_text(message.get("content"))
    raw_calls = message.get("tool_calls") or []
    if not raw_calls and isinstance(message.get("function_call"), Mapping):
        raw_calls = [{"function": message["function_call"]}]  # legacy single-call form
    if not isinstance(raw_calls, list):
        raise ModelError(f"model answer has tool_calls of type {type(raw_calls).__name__}")
    calls = tuple(_parse_call(raw, index) for index, raw in enumerate(raw_calls))
    return ModelResponse(text=text, tool_calls=calls, usage=_parse_usage(data.get("usage")))


def _identity(text: str) -> str:
    return text


def _first_message(data: Any, scrub: Callable[[str], str]) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ModelError(f"model answer is a JSON {type(data).__name__}, not an object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        err = data.get("error")
        detail = err.get("message") if isinstance(err, Mapping) else err
        if detail:
            raise ModelError(f"model endpoint answered an error: {_shorten(scrub(str(detail)))}")
        raise ModelError(
            "model answer has no choices; check that base_url is a chat-completions API"
        )
    message = choices[0].get("message") if isinstance(choices[0], Mapping) else None
    if not isinstance(message, Mapping):
        raise ModelError("model answer has no choices[0].message object")
    return message


def _content_text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content or None
    if isinstance(content, list):  # content parts: keep the text ones
        parts = [p.get("text", "") for p in content if isinstance(p, Mapping)]
        return "".join(p for p in parts if isinstance(p, str)) or None
    raise ModelError(f"model answer content has type {type(content).__name__}, expected a string")


def _parse_call(raw: Any, index: int) -> ToolCall:
    function = raw.get("function") if isinstance(raw, Mapping) else None
    if not isinstance(function, Mapping) or not function.get("name"):
        raise ModelError(f"model answer tool_calls[{index}] has no function name")
    arguments = function.get("arguments")
    if arguments is None or arguments == "":
        arguments = "{}"
    elif not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    call_id = raw.get("id") or f"call_{index}"
    return ToolCall(id=str(call_id), name=str(function["name"]), arguments=arguments)


def _parse_usage(raw: Any) -> Usage:
    if not isinstance(raw, Mapping):
        return Usage()
    prompt = _int(raw.get("prompt_tokens"))
    completion = _int(raw.get("completion_tokens"))
    total = _int(raw.get("total_tokens")) or prompt + completion
    return Usage(input_tokens=prompt, output_tokens=completion, total_tokens=total)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# --- small helpers ------------------------------------------------------------------------------


def _is_retryable(status: int) -> bool:
    return status in _RETRY_STATUSES or status >= 500


def _hint(status: int) -> str:
    if status in (401, 403):
        return "check the API key and that it may use this model"
    if status == 404:
        return "check base_url (it should end in /v1) and the model name"
    return "check the request (model name, tool schemas) against the endpoint's API"


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """The delay a server asked for: ``retry-after-ms``, else ``Retry-After`` (seconds or date).

    Header names are looked up in lower case (httpx headers match case-insensitively). None when
    neither header is present or parseable; a date in the past gives a negative delay.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return float(millis) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - datetime.now(UTC)).total_seconds()


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One verifying TLS context for all clients: building one loads the CA bundle (~0.1 s)."""
    return httpx.create_ssl_context()


def _shorten(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) > _EXCERPT_CHARS:
        return flat[: _EXCERPT_CHARS - 3] + "..."
    return flat or "(empty body)"


def _safe_url(url: str) -> str:
    """``url`` without user-info, query or fragment (either may carry credentials)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return "<invalid url>"
    return str(parsed.copy_with(userinfo=b"", query=None, fragment=None))
