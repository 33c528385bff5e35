"""Configuration, validated in one place before any service is touched: :class:`Settings`,
every ``TETHER_*`` field with its checks.

Every setting is an environment variable with the prefix ``TETHER_`` (``TETHER_BROKER_URL``...).
Precedence, highest first:

1. keyword arguments to :func:`load_settings` (or to :class:`Settings`),
2. environment variables,
3. a ``.env`` file in the working directory (written by you),
4. ``.tether/env`` (written by ``tether up`` for its local stack, removed by ``tether down``):
   the working directory's, else the project's, found as ``git`` finds its repository
   (:func:`tether.settings.files.project_env_file`),
5. the defaults. No Redis has one: with neither ``TETHER_REDIS_URL`` nor ``TETHER_BROKER_URL``
   set (nor a local stack found), the first use of Redis or the broker fails with
   :func:`no_redis_configured`, naming both and ``tether up``.

Every field is checked here (numeric ranges, the form of every URL: scheme, host, port, database;
names; the JSON settings), so a typo fails at start; reading them, with the check for unknown
``TETHER_*`` variables and the one-line :class:`~tether.errors.SettingsError`, is
:mod:`tether.settings.loading`. Secrets are :class:`pydantic.SecretStr` and never printed (see
:func:`tether.settings.loading.masked`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import pydantic
from pydantic import Field
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from tether.errors import ConfigurationError, InvalidId, SettingsError

if TYPE_CHECKING:
    from tether.settings.json import JsonTable
    from tether.settings.limits import ModelLimits
from tether.settings.checks import (
    BROKER_SCHEMES,
    check_azure,
    check_endpoint_url,
    check_model_names,
    check_modules,
    check_queue,
    check_redis_url,
    check_store_url,
)
from tether.settings.files import ENV_PREFIX, LOCAL_ENV_FILE, EnvFiles
from tether.settings.mcp import McpSettings
from tether.settings.openai import OpenAISettings
from tether.settings.webhooks import WebhookSettings

_DAY_S = 86_400
_T = TypeVar("_T")


def _invalid_value(reason: str) -> PydanticCustomError:
    # a custom error keeps the message exactly ours (no "Value error, " prefix)
    return PydanticCustomError("tether_setting", "{reason}", {"reason": reason})


class Settings(McpSettings, WebhookSettings, OpenAISettings):
    """All of Tether's settings (see docs/configuration.md); the ``TETHER_WEBHOOK_*`` ones are
    declared in :mod:`tether.settings.webhooks`, the ``TETHER_OPENAI_*`` ones in
    :mod:`tether.settings.openai`, the ``TETHER_MCP_*`` ones in :mod:`tether.settings.mcp`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments, then the environment, then the env files (see the module)."""
        return init_settings, env_settings, EnvFiles(settings_cls), file_secret_settings

    # no default Redis: a process that finds neither these nor a local stack (`tether up`)
    # fails naming them, instead of writing into whatever Redis listens on 127.0.0.1:6379
    broker_url: str | None = Field(
        default=None,
        description="Celery broker (redis://, rediss://, unix://, or amqp:// for RabbitMQ; "
        "default: TETHER_REDIS_URL).",
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
    s3_region: str = Field(default="us-east-1", min_length=1, description="S3 region.")
    s3_sse: Literal["AES256", "aws:kms"] | None = Field(
        default=None, description="Server-side encryption for S3 objects."
    )
    s3_kms_key_id: str | None = Field(default=None, description="KMS key id when s3_sse=aws:kms.")
    namespace: str = Field(default="tether", description="Prefix of every Redis key and queue.")
    tenant: str = Field(default="default", description="Default tenant.")
    redact_inputs: bool = Field(
        default=True,
        description="Producers mask common credential formats (sk-..., AKIA..., bearer tokens) "
        "in run inputs before anything is stored or sent.",
    )
    registered_runs_only: bool = Field(
        default=True,
        description="Workers act only on runs, approvals, answers and canvas tasks registered "
        "in their tenant's keyspace; a run message is never registered on delivery, and "
        "producers send only its ids. Off (false) lets any process that can publish to the "
        "broker act for any tenant: workers log a warning at every start, and a producer "
        "whose Redis credential is restricted to one tenant refuses to start.",
    )
    queue: str = Field(default="tether", description="Celery queue for run tasks.")
    # 6 s: a dead worker's run is taken over within about one TTL (renewed every TTL/3)
    lease_ttl_ms: int = Field(default=6_000, ge=500, le=3_600_000, description="Session lease TTL.")
    max_run_s: float = Field(
        default=600.0, gt=0, le=30 * _DAY_S, description="Longest allowed run."
    )
    max_wait_s: float = Field(
        default=30 * _DAY_S,
        gt=0,
        le=366 * _DAY_S,
        description="Longest a tool call may park a run on the fleet (ctx.sleep, the wait "
        "tool); a longer one fails the call, naming this setting.",
    )
    max_child_depth: int = Field(
        default=4,
        ge=0,
        le=100,
        description="How deep child runs (ctx.spawn) may nest: 1 lets a run spawn children that "
        "spawn none; 0 refuses every spawn. A tenant's max_child_depth "
        "(TETHER_TENANT_BUDGETS) may set a lower one.",
    )
    max_children_per_run: int = Field(
        default=256,
        ge=0,
        le=100_000,
        description="How many child runs one run may spawn (ctx.spawn). A tenant's "
        "max_children_per_run (TETHER_TENANT_BUDGETS) may set a lower one.",
    )
    wait_reconcile_s: float = Field(
        default=300.0,
        ge=0.05,
        le=86_400,
        description="How often one worker of the fleet checks that every waiting session's wait "
        "is in Redis, and rebuilds what a rollback lost from the sessions' heads (a flush is "
        "noticed at the next sweep and rebuilt at once).",
    )
    max_attempts: int = Field(
        default=3, ge=1, le=100, description="Attempts per run before it fails."
    )
    max_input_bytes: int = Field(
        default=256_000, ge=1, le=100_000_000, description="Largest accepted run input."
    )
    stream_max_len: int = Field(
        default=10_000, ge=100, le=100_000_000, description="Events kept per live stream."
    )
    # the live stream is only a copy (committed events are in the head and the archive), so a
    # time bound keeps Redis flat however many runs go through; keep it above the longest run
    # a live reader should see whole (TETHER_MAX_RUN_S)
    stream_retention_s: int | None = Field(
        default=None,
        ge=1,
        le=3650 * _DAY_S,
        description="Seconds a live stream keeps events (default: up to TETHER_STREAM_MAX_LEN).",
    )
    # the pieces of a streamed answer are for people watching: a bounded, short-lived copy
    delta_max_len: int = Field(
        default=10_000,
        ge=0,
        le=10_000_000,
        description=(
            "Pieces of streamed model output kept per session's delta channel, about "
            "(0: workers do not stream)."
        ),
    )
    delta_ttl_s: int = Field(
        default=30,
        ge=1,
        le=_DAY_S,
        description="Seconds a session's delta channel lives after its last piece.",
    )
    broker_visibility_timeout_s: int | None = Field(
        default=None,
        ge=1,
        le=60 * _DAY_S,
        description="Broker visibility timeout (default: 2 x TETHER_MAX_RUN_S + 300).",
    )
    archive_batch_events: int = Field(
        default=32, ge=1, le=10_000, description="Events per archive segment (head outbox size)."
    )
    head_cache_ttl_s: int = Field(
        default=60,
        ge=0,
        le=_DAY_S,
        description=(
            "Seconds a worker keeps a copy of each session's newest head in Redis, so the "
            "session's next run skips the object-store read (0: off)."
        ),
    )
    head_cache_max_bytes: int = Field(
        default=65_536,
        ge=0,
        le=16_000_000,
        description="Heads larger than this are not cached in Redis.",
    )
    result_ttl_s: int = Field(
        default=7 * _DAY_S, ge=60, le=3650 * _DAY_S, description="Run record lifetime."
    )
    sweep_interval_ms: int = Field(
        default=1_000, ge=50, le=600_000, description="Crash-recovery sweep period."
    )
    agent_modules: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Modules exposing TETHER_AGENTS (JSON or comma list)."
    )
    console_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Console host names besides loopback (comma list)."
    )
    redis_server: str | None = Field(
        default=None, description="redis-server binary for the embedded default (else PATH)."
    )
    model_limits: str = Field(
        default="",
        description=(
            "Fleet-wide model limits: JSON (or @path to a JSON file) from model name to "
            '{"requests_per_minute", "tokens_per_minute", "concurrent_requests"}.'
        ),
    )
    model_prices: str = Field(
        default="",
        description="Model prices: JSON (or @path) from model name to USD per million tokens.",
    )
    tenant_budgets: str = Field(
        default="", description="Tenant budgets: JSON (or @path) from tenant ('*': any) to limits."
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65_535,
        description="Worker: serve Prometheus metrics on this port (tether worker --metrics-port).",
    )
    metrics_host: str = Field(
        default="127.0.0.1", min_length=1, description="Worker: address the metrics port binds."
    )

    @pydantic.field_validator(
        "agent_modules", "openai_check_models", "console_hosts", mode="before"
    )
    @classmethod
    def _split_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value.strip().startswith("["):
                try:
                    return json.loads(value)
                except ValueError as exc:
                    raise _invalid_value(
                        f"not a JSON list ({exc}); use a JSON list or a comma list"
                    ) from None
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @pydantic.field_validator("agent_modules")
    @classmethod
    def _module_paths(cls, value: list[str]) -> list[str]:
        return _checked(value, check_modules(value))

    @pydantic.field_validator("openai_check_models")
    @classmethod
    def _model_names(cls, value: list[str]) -> list[str]:
        return _checked(value, check_model_names(value))

    @pydantic.field_validator("openai_model")
    @classmethod
    def _model_name(cls, value: str) -> str:
        # a stray space or newline made TETHER_MODEL_PRICES and TETHER_MODEL_LIMITS, keyed by
        # the real name, silently not apply: the assistant ran unpriced and unlimited
        return _checked(value, check_model_names([value], example="gpt-4o-mini"))

    @pydantic.field_validator("broker_url")
    @classmethod
    def _broker(cls, value: str | None) -> str | None:
        return (
            value
            if value is None
            else _checked(value, check_redis_url(value, schemes=BROKER_SCHEMES))
        )

    @pydantic.field_validator("redis_url")
    @classmethod
    def _redis(cls, value: str | None) -> str | None:
        return value if value is None else _checked(value, check_redis_url(value))

    @pydantic.field_validator("s3_endpoint_url", "openai_base_url", "openai_azure_endpoint")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        return value if value is None else _checked(value, check_endpoint_url(value))

    @pydantic.field_validator("model_limits", "model_prices", "tenant_budgets")
    @classmethod
    def _json_setting(cls, value: str, info: pydantic.ValidationInfo) -> str:
        try:
            # errors unnamed (where=""): the settings name the variable
            _json_table(info.field_name or "").parse(value, where="")
        except ConfigurationError as exc:
            raise _invalid_value(str(exc)) from None
        return value

    def limits(self) -> ModelLimits:
        """The parsed ``TETHER_MODEL_LIMITS`` (validated when the settings were read)."""
        from tether.settings.limits import ModelLimits

        return ModelLimits.parse(self.model_limits)

    @pydantic.field_validator("queue")
    @classmethod
    def _queue(cls, value: str) -> str:
        return _checked(value, check_queue(value))

    @pydantic.field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        from tether.keys import RedisKeys

        try:
            RedisKeys(value)
        except ConfigurationError as exc:
            raise _invalid_value(str(exc)) from None
        return value

    @pydantic.field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        from tether.ids import validate_tenant

        try:
            return validate_tenant(value)
        except InvalidId as exc:
            raise _invalid_value(str(exc)) from None

    @pydantic.field_validator("store_url")
    @classmethod
    def _store(cls, value: str) -> str:
        _checked(value, check_store_url(value))
        # a relative file:// URL means "relative to where the process starts", resolved once
        # here so every process (CLI, workers) agrees on one directory
        if value.startswith("file://") and not value.startswith(("file:///", "file://localhost/")):
            return "file://" + os.path.abspath(value[len("file://") :])
        return value

    @pydantic.model_validator(mode="after")
    def _redis_for_streams(self) -> Settings:
        if self.redis_url is None and self.broker_url and not _is_redis(self.broker_url):
            scheme = self.broker_url.split("://", 1)[0]
            raise _invalid_value(
                f"TETHER_REDIS_URL is required when TETHER_BROKER_URL is not a Redis URL "
                f"(broker is {scheme}://): streams, leases and run records live in Redis; "
                "set TETHER_REDIS_URL=redis://host:port/db"
            )
        return self

    @pydantic.model_validator(mode="after")
    def _azure_is_whole(self) -> Settings:
        problem = check_azure(
            self.openai_azure_endpoint,
            self.openai_azure_api_version,
            base_url_set="openai_base_url" in self.model_fields_set,
        )
        if problem is not None:
            raise _invalid_value(problem)
        return self

    @pydantic.model_validator(mode="after")
    def _retention_outlives_runs(self) -> Settings:
        retention_s = self.stream_retention_s
        if retention_s is not None and retention_s < self.max_run_s:
            # a step-durable run resumes from its checkpointed events in the live stream: a
            # shorter window would make a crashed long run start over instead of resuming
            raise _invalid_value(
                f"TETHER_STREAM_RETENTION_S ({retention_s}) is shorter than TETHER_MAX_RUN_S "
                f"({self.max_run_s:g}): a run could outlive its own live events; set "
                f"TETHER_STREAM_RETENTION_S >= {self.max_run_s:g} or lower TETHER_MAX_RUN_S"
            )
        return self

    @property
    def effective_redis_url(self) -> str:
        """Where streams, leases and run records live.

        Raises:
            SettingsError: neither ``TETHER_REDIS_URL`` nor ``TETHER_BROKER_URL`` is set (and no
                local stack's ``.tether/env`` was found).
            ConfigurationError: only ``TETHER_BROKER_URL`` is, and it is no Redis.
        """
        if self.redis_url:
            return self.redis_url
        if self.broker_url is None:
            raise no_redis_configured()
        if _is_redis(self.broker_url):
            return self.broker_url
        raise ConfigurationError(
            "TETHER_REDIS_URL is required when TETHER_BROKER_URL is not a Redis URL "
            f"(broker is {self.broker_url.split('://', 1)[0]}://)"
        )

    @property
    def effective_broker_url(self) -> str:
        """The Celery broker: ``TETHER_BROKER_URL``, else the Redis of ``TETHER_REDIS_URL``.

        Raises:
            SettingsError: neither is set (see :attr:`effective_redis_url`), or only a Redis
                Cluster is, which Celery cannot use as its broker.
        """
        if self.broker_url:
            return self.broker_url
        url = self.effective_redis_url
        if not _is_redis(url):
            raise SettingsError(
                "TETHER_BROKER_URL is required when TETHER_REDIS_URL is a Redis Cluster "
                "(Celery cannot use one as its broker): set TETHER_BROKER_URL=redis://host:port/db "
                "or amqp://host:port//",
                variables=("TETHER_BROKER_URL",),
            )
        return url

    @property
    def visibility_timeout_s(self) -> int:
        """Broker visibility timeout: by default longer than the longest run plus a margin for
        queueing. A shorter one only costs redeliveries: each finds the run's lease held and its
        request already registered, and does nothing."""
        if self.broker_visibility_timeout_s is not None:
            return self.broker_visibility_timeout_s
        return int(self.max_run_s * 2 + 300)


def _json_table(field: str) -> type[JsonTable[Any]]:
    """The table a JSON setting parses into (imported on use: most processes set none of them,
    and each costs pydantic a validator to build)."""
    from tether.settings.budgets import TenantBudgets
    from tether.settings.limits import ModelLimits
    from tether.settings.prices import ModelPrices

    tables: dict[str, type[JsonTable[Any]]] = {
        "model_limits": ModelLimits,
        "model_prices": ModelPrices,
        "tenant_budgets": TenantBudgets,
    }
    return tables[field]


def no_redis_configured() -> SettingsError:
    """The error of a process that finds no Redis to use: no setting names one and no local
    stack (``tether up``) was found from the working folder (:mod:`tether.settings.files`)."""
    return SettingsError(
        "no Redis configured: TETHER_REDIS_URL and TETHER_BROKER_URL are unset and no local "
        f"stack was found ({LOCAL_ENV_FILE} in {Path.cwd()} or its project's root). Run "
        "'tether up' in your project's folder to start a local stack, or set "
        "TETHER_REDIS_URL=redis://host:port/db (and TETHER_BROKER_URL for another broker)",
        variables=("TETHER_REDIS_URL", "TETHER_BROKER_URL"),
    )


def _is_redis(url: str) -> bool:
    return url.startswith(("redis://", "rediss://", "unix://"))


def _checked(value: _T, problem: str | None) -> _T:
    if problem is not None:
        raise _invalid_value(problem)
    return value
