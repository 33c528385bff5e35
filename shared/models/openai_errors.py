"""Every failure of the ``openai`` SDK as one :class:`~tether.errors.ModelError`, keys scrubbed.

The message names the endpoint (without credentials), the HTTP status, the provider's request id
(``x-request-id``), a short excerpt of what the provider answered, and what to do about it. The
API key (and any other credential the client sends) is replaced by ``***`` in the message and
the excerpt: a provider, a proxy or a hostile server may echo the key it received, and the
message travels to run results, ``ERROR`` events, logs and spans.

Callers raise the translated error *outside* their ``except`` block, so the SDK's exception
(which holds the HTTP request) never rides along as ``__context__``.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Iterable
from typing import Any

import openai
from pydantic import SecretStr

from tether.errors import ModelError
from tether.settings.checks import mask_url

EXCERPT_CHARS = 200
REDACTED = "***"
#: Statuses the SDK retries (its ``_should_retry``): the message then says how many attempts.
RETRIED_STATUSES = frozenset({408, 409, 429})
#: What to do about a 429 the SDK did not retry (the model has a fleet-wide limit, which paused
#: it for everyone and waited its turn again, up to 8 times).
FLEET_429_HINT = (
    "the provider is rate limiting below the model's fleet-wide limit: lower its "
    "requests_per_minute or tokens_per_minute in TETHER_MODEL_LIMITS"
)


class Scrubber:
    """Replaces known secrets in text with ``***``.

    Args:
        secrets: the credentials to hide (empty ones are ignored); kept as ``SecretStr`` so
            ``vars()`` of the holder never shows them.
    """

    def __init__(self, secrets: Iterable[SecretStr | str | None]) -> None:
        values = []
        for secret in secrets:
            value = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
            if value:
                values.append(value.removeprefix("Bearer ").strip())
        # longest first, so a secret that contains another is replaced whole
        self._secrets = tuple(SecretStr(v) for v in sorted(set(values), key=len, reverse=True))

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret.get_secret_value(), REDACTED)
        return text

    def __repr__(self) -> str:
        return f"Scrubber({len(self._secrets)} secret(s))"


def shorten(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    if len(flat) > limit:
        return flat[: limit - 3] + "..."
    return flat or "(empty body)"


def safe_url(url: object) -> str:
    """An endpoint URL as safe to print: passwords and secret query parameters masked."""
    return mask_url(str(url))


class ErrorContext:
    """What a translated error needs to say: where the call went and how it was configured.

    Args:
        endpoint: the API root, e.g. ``https://api.openai.com/v1`` (credentials are masked).
        scrub: hides the client's credentials.
        max_retries: the SDK's retry budget (to say how many attempts were made).
        timeout_s: the per-request timeout.
        retry_rate_limits: whether the SDK retried 429s (off: behind a fleet-wide limit).
    """

    def __init__(
        self,
        endpoint: str,
        scrub: Scrubber,
        *,
        max_retries: int,
        timeout_s: float,
        retry_rate_limits: bool = True,
    ):
        self.endpoint = safe_url(endpoint)
        self.scrub = scrub
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.retry_rate_limits = retry_rate_limits

    def __repr__(self) -> str:
        return f"ErrorContext({self.endpoint!r})"

    def translate(self, exc: BaseException) -> ModelError:
        """The :class:`ModelError` for an SDK exception."""
        if isinstance(exc, openai.APIStatusError):
            return self._status_error(exc)
        if isinstance(exc, openai.APITimeoutError):
            return ModelError(
                f"model endpoint {self.endpoint} timed out after {self.timeout_s:g}s "
                f"({self._attempts()}); raise TETHER_OPENAI_TIMEOUT_S, or check that the "
                "server is not overloaded"
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            detail = f"{type(cause).__name__}: {cause}" if cause else str(exc)
            return ModelError(
                f"model endpoint {self.endpoint} could not be reached ({self.scrub(detail)}; "
                f"{self._attempts()}); check TETHER_OPENAI_BASE_URL and that the server is up"
            )
        if isinstance(exc, openai.APIResponseValidationError):
            excerpt = self._excerpt(exc.body)
            return ModelError(
                f"model endpoint {self.endpoint} answered HTTP {exc.status_code} with a body "
                f"that is not a valid answer: {excerpt!r}; check that TETHER_OPENAI_BASE_URL is "
                "an OpenAI-compatible API root (ending in /v1)",
                status=exc.status_code,
                excerpt=excerpt,
            )
        if isinstance(exc, openai.APIError):  # e.g. an error event in the middle of a stream
            excerpt = self._excerpt(exc.body) if exc.body is not None else ""
            message = shorten(self.scrub(exc.message))
            return ModelError(
                f"model endpoint {self.endpoint} failed: {message}; retry later, or check the "
                "request against the provider's API",
                excerpt=excerpt,
            )
        return ModelError(
            f"model client for {self.endpoint} failed: {type(exc).__name__}: "
            f"{shorten(self.scrub(str(exc)))}"
        )

    def failed(self, detail: str) -> ModelError:
        """A :class:`ModelError` for a response the provider failed mid-stream (``detail``: its
        error code and message)."""
        excerpt = shorten(self.scrub(detail))
        return ModelError(
            f"model endpoint {self.endpoint} failed the response mid-stream ({excerpt}); "
            "retry later, or check the request against the provider's API",
            excerpt=excerpt,
        )

    def malformed(self, what: str, chunk: str, problem: str) -> ModelError:
        """A :class:`ModelError` for an answer (``what``) the client cannot read, quoting it."""
        excerpt = shorten(self.scrub(chunk))
        return ModelError(
            f"model endpoint {self.endpoint} sent a malformed {what} ({problem}): {excerpt!r}; "
            "check that the server speaks the OpenAI API (TETHER_OPENAI_API=chat|responses)",
            excerpt=excerpt,
        )

    def empty_stream(self, events: int) -> ModelError:
        """A :class:`ModelError` for a streamed answer that ended without any text or tool
        call (``events``: how many stream events came)."""
        return ModelError(
            f"model endpoint {self.endpoint} ended a streamed answer without any text or tool "
            f"call ({events} stream events); the step fails rather than complete the run with "
            "no output. Check the model name and that the endpoint streams (or turn streaming "
            "off with TETHER_DELTA_MAX_LEN=0)"
        )

    def _status_error(self, exc: openai.APIStatusError) -> ModelError:
        status = exc.status_code
        excerpt = self._excerpt(exc.body if exc.body is not None else _text(exc.response))
        rid = exc.request_id
        where = f" (request id {rid})" if rid else ""
        retried = status in RETRIED_STATUSES or status >= 500
        if status == 429 and not self.retry_rate_limits:
            retried = False
        tried = f" after {self._attempts()}" if retried else ""
        advice = hint(status) if retried or status != 429 else FLEET_429_HINT
        return ModelError(
            f"model endpoint {self.endpoint} answered HTTP {status}{where}{tried}: "
            f"{_clause(excerpt)}; {advice}",
            status=status,
            request_id=rid,
            excerpt=excerpt,
            retry_after_s=retry_after_s(exc.response),
        )

    def _attempts(self) -> str:
        attempts = self.max_retries + 1
        return f"{attempts} attempt{'s' if attempts != 1 else ''}"

    def _excerpt(self, body: Any) -> str:
        return body_excerpt(body, self.scrub)


def body_excerpt(body: Any, scrub: Scrubber) -> str:
    """The provider's error message when ``body`` has one, else the body; scrubbed, short."""
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, dict) else error
        text = message if isinstance(message, str) else json.dumps(body, default=str)
    elif isinstance(body, str):
        text = body
    else:
        text = json.dumps(body, default=str)
    return shorten(scrub(text))


def retry_after_s(response: Any) -> float | None:
    """The wait a response asks for: ``retry-after-ms`` (OpenAI's), else ``Retry-After`` in
    seconds or as an HTTP date; None when absent, unreadable or not positive."""
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            wait_s = float(millis) / 1000
        else:
            value = headers.get("retry-after")
            if value is None:
                return None
            try:
                wait_s = float(value)
            except ValueError:
                when = email.utils.parsedate_to_datetime(value)
                wait_s = when.timestamp() - time.time()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return wait_s if wait_s > 0 else None


def _clause(text: str) -> str:
    """``text`` without a final full stop, to go on with "; ..." (an ellipsis stays)."""
    return text[:-1] if text.endswith(".") and not text.endswith("...") else text


def _text(response: Any) -> str:
    try:
        return str(response.text)
    except Exception:  # a streamed body that was not read
        return ""


def hint(status: int) -> str:
    """What to do about an HTTP ``status`` from a model endpoint."""
    if status == 401:
        return "check TETHER_OPENAI_API_KEY (the server refused the key)"
    if status == 403:
        return "check that the key in TETHER_OPENAI_API_KEY may use this model"
    if status == 404:
        return (
            "check TETHER_OPENAI_BASE_URL (an API root ending in /v1), the model name "
            "(TETHER_OPENAI_MODEL, or the Azure deployment) and TETHER_OPENAI_API"
        )
    if status == 429:
        return (
            "the provider is rate limiting: lower the concurrency or raise "
            "TETHER_OPENAI_MAX_RETRIES"
        )
    if status >= 500:
        return "the provider failed: retry later or raise TETHER_OPENAI_MAX_RETRIES"
    return "check the request (model name, tool schemas) against the endpoint's API"
