"""Where model calls go and how: one :class:`OpenAIEndpoint` builds the ``openai`` SDK clients.

An endpoint is an OpenAI-compatible API root (``https://api.openai.com/v1``, a vLLM, Ollama,
llama.cpp or LiteLLM server at ``http://host:port/v1``) or an Azure OpenAI resource
(:class:`AzureTarget`: endpoint, API version, deployment), with the API key, the per-request
timeout and the SDK's retry budget. Retries are the SDK's: 408, 409, 429 and 5xx answers,
timeouts and connection errors, with exponential backoff (0.5 s doubling to 8 s, jittered) and a
server's ``Retry-After`` honoured up to two minutes.

The key is held as a :class:`~pydantic.SecretStr` and unwrapped only to build an SDK client.
Without a key the clients send the placeholder :data:`NO_KEY` (servers that need none ignore it);
``$OPENAI_API_KEY`` is never read: Tether's key is ``TETHER_OPENAI_API_KEY``, which its log and
event redaction knows about.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import openai
from pydantic import SecretStr

from tether.errors import ConfigurationError
from tether.models.openai_errors import ErrorContext, Scrubber, safe_url
from tether.settings.checks import check_http_url

if TYPE_CHECKING:
    from tether.settings import Settings

DEFAULT_BASE_URL = "https://api.openai.com/v1"
NO_KEY = "no-key"
"""What is sent as the key when none is configured (the SDK insists on one)."""
#: Extra headers whose values are credentials too: held and scrubbed like the key.
SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key"})


@dataclass(frozen=True)
class AzureTarget:
    """An Azure OpenAI deployment.

    Attributes:
        endpoint: the resource, e.g. ``https://my-resource.openai.azure.com``.
        api_version: the API version, e.g. ``2024-10-21``.
        deployment: the deployment chat requests go to (None: the request's model name, which
            Azure then reads as the deployment).
    """

    endpoint: str
    api_version: str
    deployment: str | None = None


@dataclass(frozen=True, eq=False)
class OpenAIEndpoint:
    """Where model calls go, with which key, timeout and retries.

    Args:
        base_url: the API root including the version prefix (ignored when ``azure`` is given).
        api_key: the key (None or empty: :data:`NO_KEY`).
        timeout_s: the timeout of one request; each retry gets its own.
        max_retries: the SDK's retries after the first attempt (0: none).
        extra_headers: headers added to every request (e.g. an organisation id); values of
            credential headers (``api-key``, ``authorization``...) are held and scrubbed like
            the key.
        azure: send to an Azure OpenAI deployment instead of ``base_url``.
        retry_rate_limits: whether the SDK retries 429s (off: a 429 reaches the caller at its
            first answer; 5xx, 408, 409, timeouts and connection errors are still retried).

    Raises:
        ConfigurationError: a URL that is not http(s), a negative retry budget, or a timeout
            that is not positive.
    """

    base_url: str = DEFAULT_BASE_URL
    api_key: SecretStr | None = None
    timeout_s: float = 60.0
    max_retries: int = 2
    extra_headers: Mapping[str, str | SecretStr] = field(default_factory=dict)
    azure: AzureTarget | None = None
    retry_rate_limits: bool = True

    def __post_init__(self) -> None:
        url = self.azure.endpoint if self.azure is not None else self.base_url
        problem = check_http_url(url)
        if problem is not None:
            raise ConfigurationError(f"model endpoint {safe_url(url)!r} is not valid: {problem}")
        if self.max_retries < 0:
            raise ConfigurationError(f"max_retries={self.max_retries} is negative; pass 0 or more")
        if not self.timeout_s > 0:
            raise ConfigurationError(f"timeout_s={self.timeout_s} must be positive; pass e.g. 60.0")
        key = self.api_key
        object.__setattr__(self, "api_key", key if key and key.get_secret_value() else None)
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        headers = {
            name: SecretStr(value)
            if isinstance(value, str) and name.lower() in SENSITIVE_HEADERS
            else value
            for name, value in self.extra_headers.items()
        }
        object.__setattr__(self, "extra_headers", headers)

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIEndpoint:
        """The endpoint ``TETHER_OPENAI_*`` configures (Azure when its endpoint is set)."""
        azure = None
        if settings.openai_azure_endpoint and settings.openai_azure_api_version:
            azure = AzureTarget(
                settings.openai_azure_endpoint,
                settings.openai_azure_api_version,
                settings.openai_azure_deployment,
            )
        return cls(
            settings.openai_base_url,
            settings.openai_api_key,
            settings.openai_timeout_s,
            settings.openai_max_retries,
            {},
            azure,
        )

    @property
    def url(self) -> str:
        """Where requests go, credentials masked (for messages)."""
        if self.azure is not None:
            return safe_url(self.azure.endpoint.rstrip("/") + "/openai")
        return safe_url(self.base_url)

    def __repr__(self) -> str:
        key = "None" if self.api_key is None else repr(self.api_key)  # SecretStr masks itself
        azure = "" if self.azure is None else f", azure={self.azure!r}"
        azure += "" if self.retry_rate_limits else ", retry_rate_limits=False"
        return (
            f"OpenAIEndpoint({self.url!r}, api_key={key}, timeout_s={self.timeout_s:g}, "
            f"max_retries={self.max_retries}, extra_headers={sorted(self.extra_headers)}{azure})"
        )

    def scrubber(self) -> Scrubber:
        """Hides this endpoint's key and credential headers in text."""
        secrets = [v for v in self.extra_headers.values() if isinstance(v, SecretStr)]
        return Scrubber([self.api_key, *secrets])

    def error_context(self) -> ErrorContext:
        """What translated SDK errors say about this endpoint."""
        return ErrorContext(
            self.url,
            self.scrubber(),
            max_retries=self.max_retries,
            timeout_s=self.timeout_s,
            retry_rate_limits=self.retry_rate_limits,
        )

    def surfacing_rate_limits(self) -> OpenAIEndpoint:
        """This endpoint with the SDK's 429 retries off (see ``retry_rate_limits``)."""
        return dataclasses.replace(self, retry_rate_limits=False)

    def _common(self) -> dict[str, Any]:
        """The arguments every SDK client of this endpoint takes."""
        key = self.api_key.get_secret_value() if self.api_key is not None else NO_KEY
        headers = {
            name: value.get_secret_value() if isinstance(value, SecretStr) else value
            for name, value in self.extra_headers.items()
        }
        common: dict[str, Any] = {
            "api_key": key,
            "timeout": self.timeout_s,
            "max_retries": self.max_retries,
            "default_headers": headers,
        }
        if self.azure is None:
            return {"base_url": self.base_url, **common}
        azure = self.azure
        return {
            "azure_endpoint": azure.endpoint,
            "azure_deployment": azure.deployment,
            "api_version": azure.api_version,
            **common,
        }

    def sync_client(self) -> openai.OpenAI:
        """A new ``openai.OpenAI`` (``openai.AzureOpenAI`` for Azure) for this endpoint."""
        common = self._common()
        if not self.retry_rate_limits:
            hooks = {"response": [_not_retried_if_429]}
            common["http_client"] = openai.DefaultHttpxClient(event_hooks=hooks)
        if self.azure is not None:
            return openai.AzureOpenAI(**common)
        return openai.OpenAI(**common)

    def async_client(self) -> openai.AsyncOpenAI:
        """A new ``openai.AsyncOpenAI`` (``openai.AsyncAzureOpenAI`` for Azure)."""
        http = _async_http(self.retry_rate_limits)
        if self.azure is not None:
            return openai.AsyncAzureOpenAI(**self._common(), http_client=http)
        return openai.AsyncOpenAI(**self._common(), http_client=http)


def _not_retried_if_429(response: Any) -> None:
    """Mark a 429 as not to be retried: the SDK obeys an ``x-should-retry`` answer header
    before its own rules (``BaseClient._should_retry``), and keeps retrying everything else."""
    if response.status_code == 429:
        response.headers["x-should-retry"] = "false"


async def _anot_retried_if_429(response: Any) -> None:
    _not_retried_if_429(response)


def _async_http(retry_rate_limits: bool = True) -> openai.DefaultAsyncHttpxClient:
    """The SDK's default asyncio HTTP client, without the finalizer of the one it builds itself:
    that one schedules its close on whatever loop runs when it is collected, which fails (and
    logs) for a client whose own loop is gone."""
    if retry_rate_limits:
        return openai.DefaultAsyncHttpxClient()
    return openai.DefaultAsyncHttpxClient(event_hooks={"response": [_anot_retried_if_429]})
