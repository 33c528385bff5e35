"""Configuration, read from the environment in one place.

Every setting is an environment variable with the prefix ``TETHER_`` (``TETHER_BROKER_URL``...),
optionally from a ``.env`` file in the working directory. Precedence, highest first: explicit
keyword arguments to :func:`load_settings`, environment variables, the ``.env`` file, defaults.
An unknown ``TETHER_*`` variable or a malformed value fails at start with a message naming the
variable. Secrets are :class:`pydantic.SecretStr` and never printed (see :func:`masked`).
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Any, Literal

import pydantic
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from tether.errors import ConfigurationError

ENV_PREFIX = "TETHER_"


class Settings(BaseSettings):
    """All of Tether's settings (see the README's configuration table)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=".env", extra="forbid", frozen=True
    )

    broker_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="Celery broker (redis://, rediss://, unix://, or amqp:// for RabbitMQ).",
    )
    redis_url: str | None = Field(
        default=None,
        description="Redis for event streams, leases and run records (default: the broker URL "
        "when it is a Redis URL).",
    )
    store_url: str = Field(
        default="file://./.tether/store",
        description="Snapshot store and event archive: file:///path, s3://bucket/prefix, memory://",
    )
    s3_endpoint_url: str | None = Field(default=None, description="S3 endpoint (non-AWS).")
    s3_region: str = Field(default="us-east-1", description="S3 region.")
    s3_sse: Literal["AES256", "aws:kms"] | None = Field(
        default=None, description="Server-side encryption for S3 objects."
    )
    s3_kms_key_id: str | None = Field(default=None, description="KMS key id when s3_sse=aws:kms.")
    namespace: str = Field(default="tether", description="Prefix of every Redis key and queue.")
    tenant: str = Field(default="default", description="Default tenant.")
    queue: str = Field(default="tether", description="Celery queue for run tasks.")
    # 6 s: a dead worker's run is taken over within about one TTL (renewed every TTL/3)
    lease_ttl_ms: int = Field(default=6_000, ge=500, description="Session lease TTL.")
    max_run_s: float = Field(default=600.0, gt=0, description="Longest allowed run.")
    max_attempts: int = Field(default=3, ge=1, description="Attempts per run before it fails.")
    max_input_bytes: int = Field(default=256_000, ge=1, description="Largest accepted run input.")
    stream_max_len: int = Field(default=10_000, ge=100, description="Events kept per live stream.")
    broker_visibility_timeout_s: int | None = Field(
        default=None,
        ge=1,
        description="Broker visibility timeout (default: 2 x TETHER_MAX_RUN_S + 300).",
    )
    archive_batch_events: int = Field(
        default=32, ge=1, le=10_000, description="Events per archive segment (head outbox size)."
    )
    result_ttl_s: int = Field(default=7 * 24 * 3600, ge=60, description="Run record lifetime.")
    sweep_interval_ms: int = Field(default=1_000, ge=50, description="Crash-recovery sweep period.")
    agent_modules: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Modules exposing TETHER_AGENTS (JSON or comma list)."
    )
    redis_server: str | None = Field(
        default=None, description="redis-server binary for the embedded default (else PATH)."
    )
    openai_base_url: str = Field(
        default="https://api.openai.com/v1", description="OpenAI-compatible endpoint."
    )
    openai_api_key: SecretStr | None = Field(default=None, description="API key (secret).")
    openai_model: str = Field(default="gpt-4o-mini", description="Model name for the openai agent.")

    @pydantic.field_validator("agent_modules", mode="before")
    @classmethod
    def _split_modules(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value.strip().startswith("["):
                return json.loads(value)
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @pydantic.field_validator("store_url")
    @classmethod
    def _absolute_file_url(cls, value: str) -> str:
        # a relative file:// URL means "relative to where the process starts", resolved once
        # here so every process (CLI, workers) agrees on one directory
        if value.startswith("file://") and not value.startswith("file:///"):
            return "file://" + os.path.abspath(value[len("file://") :])
        return value

    @property
    def effective_redis_url(self) -> str:
        """Where streams, leases and run records live."""
        if self.redis_url:
            return self.redis_url
        if self.broker_url.startswith(("redis://", "rediss://", "unix://")):
            return self.broker_url
        raise ConfigurationError(
            "TETHER_REDIS_URL is required when TETHER_BROKER_URL is not a Redis URL "
            f"(broker is {self.broker_url.split('://', 1)[0]}://)"
        )

    @property
    def visibility_timeout_s(self) -> int:
        """Broker visibility timeout: by default longer than the longest run plus a margin for
        queueing. A shorter one only costs redeliveries: each finds the run's lease held and its
        request already registered, and does nothing."""
        if self.broker_visibility_timeout_s is not None:
            return self.broker_visibility_timeout_s
        return int(self.max_run_s * 2 + 300)


def _unknown_variables() -> list[str]:
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    return sorted(k for k in os.environ if k.startswith(ENV_PREFIX) and k not in known)


def load_settings(**overrides: Any) -> Settings:
    """Read settings; raise :class:`ConfigurationError` naming the variable on any problem."""
    unknown = _unknown_variables()
    if unknown:
        raise ConfigurationError(
            f"unknown setting(s) {', '.join(unknown)}; known: "
            + ", ".join(ENV_PREFIX + n.upper() for n in Settings.model_fields)
        )
    try:
        return Settings(**overrides)
    except (SettingsError, ValueError) as exc:
        if isinstance(exc, pydantic.ValidationError):
            raise _invalid(exc) from exc
        raise ConfigurationError(f"invalid settings: {exc}") from exc


def _invalid(exc: pydantic.ValidationError) -> ConfigurationError:
    problems = "; ".join(
        f"{ENV_PREFIX}{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors()
    )
    return ConfigurationError(f"invalid settings: {problems}")


def masked(settings: Settings) -> dict[str, Any]:
    """The effective settings with secrets and URL passwords masked (for printing)."""
    from tether.persistence.redis_conn import redact_url

    out: dict[str, Any] = {}
    for name in Settings.model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            value = "********" if value.get_secret_value() else ""
        elif isinstance(value, str) and "://" in value:
            value = redact_url(value)
        out[ENV_PREFIX + name.upper()] = value
    return out
