"""The options of one run, declared once: :class:`RunOptions`, and :class:`RunOptionsKwargs`.

Every way of submitting a run takes the same options: ``Producer.run``, ``run_async`` and
``resolve``, their :class:`~tether.producer.client_aio.AsyncProducer` twins,
:class:`~tether.producer.submission.RunSpec`, ``tether run`` and ``tether submit``, batch cases,
and ``tether_run`` in Celery's canvas. They are declared here, once: the fields of
:class:`RunOptions` give each option its type, default, validation and description, and
:class:`~tether.runs.contract.RunRequest` extends the model, so the wire request validates them
with the same rules. :class:`RunOptionsKwargs` is the same
options as keyword arguments (``**options: Unpack[RunOptionsKwargs]``), so mypy checks the
callers of every signature that takes them; ``tests/test_request_shape.py`` fails when the two
disagree.

A submission does not build a ``RunOptions`` of its own: the options go, as given, into the one
``RunRequest`` the producer validates (validating them here first would validate every run
twice).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal, Required, TypedDict

import pydantic
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from tether.ids import validate_id, validate_tenant
from tether.runs.option_docs import MAX_METADATA_BYTES, OPTION_HELP, RUN_OPTIONS

#: Deeper metadata is refused: stored in the session head, it must stay serialisable and
#: readable with room to spare (pydantic stops at about 250 levels).
MAX_METADATA_DEPTH = 32


class BusyPolicy(StrEnum):
    """What to do when the session is already running or has queued runs (LangGraph's
    multitask strategies)."""

    ENQUEUE = "enqueue"
    """Queue behind the runs before it (FIFO)."""
    REJECT = "reject"
    """Refuse the run (``SessionBusy``) when the session has queued or running runs."""
    INTERRUPT = "interrupt"
    """Queue it, and stop the running run at its next step boundary: it ends ``INTERRUPTED``
    with the steps it finished kept in memory."""
    ROLLBACK = "rollback"
    """Queue it, and stop the running run at its next step boundary: it ends ``CANCELLED``
    and nothing of it stays in memory."""


class RunOptions(BaseModel):
    """How to run one request: the options every way of submitting a run takes."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)

    # descriptions from option_docs, not attribute docstrings: the CLI's help reads them there
    # without building this model, and pydantic would read this module's source at every
    # import to turn docstrings into descriptions
    agent: str = Field(
        min_length=1,
        max_length=128,
        description=OPTION_HELP["agent"],
    )
    tenant: str | None = Field(
        default=None,
        description=OPTION_HELP["tenant"],
    )
    request_id: str | None = Field(
        default=None,
        description=OPTION_HELP["request_id"],
    )
    metadata: dict[str, JsonValue] = Field(
        default_factory=dict,
        description=OPTION_HELP["metadata"],
    )
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=86_400,
        strict=True,
        description=OPTION_HELP["timeout_s"],
    )
    on_busy: BusyPolicy = Field(
        default=BusyPolicy.ENQUEUE,
        description=OPTION_HELP["on_busy"],
    )
    durability: Literal["run", "step"] | None = Field(
        default=None,
        description=OPTION_HELP["durability"],
    )
    webhook: str | None = Field(
        default=None,
        max_length=2048,
        description=OPTION_HELP["webhook"],
    )

    @pydantic.field_validator("agent")
    @classmethod
    def _agent(cls, value: str) -> str:
        check_text(value, "agent")
        return value

    @pydantic.field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str | None) -> str | None:
        return None if value is None else validate_tenant(value)

    @pydantic.field_validator("request_id")
    @classmethod
    def _request_id(cls, value: str | None) -> str | None:
        return None if value is None else validate_id(value, kind="request id")

    @pydantic.field_validator("webhook")
    @classmethod
    def _webhook(cls, value: str | None) -> str | None:
        if value is not None:
            check_run_webhook_url(value)
        return value

    @pydantic.field_validator("metadata")
    @classmethod
    def _metadata_size(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        check_json_tree(value, "metadata")
        try:
            size = len(json.dumps(value, allow_nan=False))
        except ValueError as exc:  # NaN or infinity: JSON has no such numbers
            raise ValueError(f"metadata holds a number JSON cannot represent ({exc})") from exc
        if size > MAX_METADATA_BYTES:
            raise ValueError(f"metadata is larger than {MAX_METADATA_BYTES} bytes of JSON")
        return value


class RunExtras(TypedDict, total=False):
    """:class:`RunOptionsKwargs` but ``agent``: what :class:`RunSpec` takes after its agent.

    Types are what callers pass (a ``str`` policy, ``None`` metadata); the request validates
    the values.
    """

    tenant: str | None
    request_id: str | None
    metadata: dict[str, JsonValue] | None
    timeout_s: float | None
    on_busy: str
    durability: str | None
    webhook: str | None


class RunOptionsKwargs(RunExtras):
    """The fields of :class:`RunOptions` as keyword arguments: ``agent`` is required, the rest
    take the model's defaults when left out (``metadata=None`` is no metadata)."""

    agent: Required[str]


def check_options(options: Mapping[str, object]) -> None:
    """Refuse a keyword that is no run option: one the request has for itself (``run_id``,
    ``session_id``...) would otherwise override it.

    Raises:
        TypeError: naming the unknown keywords and the options.
    """
    unknown = options.keys() - RUN_OPTIONS
    if unknown:
        raise TypeError(
            f"unexpected keyword argument(s) {', '.join(map(repr, sorted(unknown)))}: "
            f"the run options are {', '.join(RunOptions.model_fields)}"
        )


def check_webhook_url(url: str) -> None:
    """Refuse a webhook URL that is not ``http(s)://host...`` (where it points is checked where
    the settings are known: :mod:`tether.runs.webhooks.addresses`).

    Raises:
        ValueError: naming the URL (masked).
    """
    from tether.settings.checks import check_http_url, mask_url

    check_text(url, "webhook")
    problem = check_http_url(url)
    if problem is not None:
        raise ValueError(f"webhook URL {mask_url(url)[:200]!r} is not valid: {problem}")


def check_run_webhook_url(url: str) -> None:
    """:func:`check_webhook_url`, and refuse a credential in the URL: a run's options are
    stored with its record (and a delivery in the dead letters), so one there would be a
    secret at rest.

    Raises:
        ValueError: naming the URL (masked), the credential and where it belongs.
    """
    from tether.settings.checks import mask_url, url_credential

    check_webhook_url(url)
    credential = url_credential(url)
    if credential is not None:
        raise ValueError(
            f"webhook URL {mask_url(url)[:200]!r} carries a credential ({credential}), and a "
            "run's options are stored: give the URL with its credential to the workers in "
            "TETHER_WEBHOOK_URLS (settings, never stored), or rely on the delivery's signature "
            "(TETHER_WEBHOOK_SECRETS) to authenticate it"
        )


def check_text(value: str, what: str) -> None:
    """Refuse text that is not encodable as UTF-8 (lone surrogates from a JSON ``\\ud800``).

    Raises:
        ValueError: naming ``what`` and the position.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} is not valid Unicode text (lone surrogate at position {exc.start}); "
            "send UTF-8 text"
        ) from None


def check_json_tree(value: Any, what: str, depth: int = 0) -> None:
    """Refuse JSON values nested deeper than :data:`MAX_METADATA_DEPTH` or with invalid text.

    Raises:
        ValueError: naming ``what``.
    """
    if depth > MAX_METADATA_DEPTH:
        raise ValueError(f"{what} is nested deeper than {MAX_METADATA_DEPTH} levels")
    if isinstance(value, str):
        check_text(value, what)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(str(key), f"{what} key")
            check_json_tree(item, what, depth + 1)
    elif isinstance(value, list):
        for item in value:
            check_json_tree(item, what, depth + 1)


__all__ = [
    "MAX_METADATA_BYTES",
    "RUN_OPTIONS",
    "BusyPolicy",
    "RunExtras",
    "RunOptions",
    "RunOptionsKwargs",
    "check_options",
]
