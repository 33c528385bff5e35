"""The wire contract between producers and workers: names, queues, requests, results, keys.

Producers and workers import this module, never each other. It holds the Celery task names and
the default queue, the run request a producer enqueues and the run result it gets back (versioned
JSON documents validated with pydantic at every edge), and the Redis key layout
(:class:`~tether.keys.RedisKeys`). None of these names change between releases without a
migration: sessions and queued runs written by 0.1 are read by this version.

Schema versions (field ``v``):
- 1: initial format. Later additive field: ``trace`` (optional, omitted when None; a worker
  older than it refuses a request that carries one, so trace producers only once every worker
  is upgraded). Later additive field: ``reply_to`` (the submitting producer's id, same
  rule: upgrade every worker before the producers, see docs/upgrading.md). Later additive
  field: ``parent`` (a child run's parent, :class:`ParentLink`; only workers write it, and
  only once every worker is upgraded to read it).

One request, validated once on each side and serialized once (:class:`WireRequest`):
- The producer validates the :class:`RunRequest` once and serializes it once; the same JSON
  text is the run record's ``request`` in Redis (the submit script's argument) and the run
  message's ``request`` argument (a JSON string; earlier producers sent a JSON object, which
  workers still accept; a worker older than this refuses the string, so roll workers first).
- The worker validates the message's request once, at the task boundary (:func:`parse_wire`).
  Its claim registers that text (a duplicate when the producer did) and reads back the run
  record of the session's next run. **The worker runs the registered copy**, the request in
  Redis that the submit wrote: when the record's text is byte-identical to the message's, the
  request validated at the boundary *is* that copy and is reused; when they differ (a message
  of an earlier producer, whose JSON is spelled differently; a hand-made or forged one), the
  record is validated, and it runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import pydantic
from pydantic import Field

from tether.core.events import now_ms
from tether.core.results import Resolution, RunOutcome, RunStatus
from tether.errors import InputTooLarge, InvalidId, InvalidInput, TetherError, error_from_record
from tether.ids import validate_id, validate_tenant
from tether.keys import RedisKeys
from tether.runs.options import (
    MAX_METADATA_BYTES,
    BusyPolicy,
    RunOptions,
    check_json_tree,
    check_text,
)

#: The Celery task that carries one :class:`RunRequest` (its only keyword argument: ``request``,
#: the request's JSON text, :class:`WireRequest`).
RUN_TASK = "tether.run"
#: The Celery task that asks a worker to drain one session's queue (``tenant``, ``session_id``).
DRAIN_TASK = "tether.drain"
#: The Celery task of one run in a canvas (``tether.worker.canvas.tether_run``): its run is
#: :func:`canvas_run_id` of its task id.
CANVAS_RUN_TASK = "tether.canvas.run"
#: The broker queue producers send to and workers consume when none is configured.
DEFAULT_QUEUE = "tether"

RUN_SCHEMA_VERSION = 1


def canvas_run_id(task_id: str) -> str:
    """The run id of canvas task ``task_id``: the task makes its run from it, and a worker's
    presence names the run it executes by it, without reading the task's arguments."""
    return f"run-{task_id}"


class RunRef(NamedTuple):
    """Where a run lives: its tenant, session and id. A run's record, cancel flag and attempt
    counter sit in its session's Redis slot, so reaching them takes all three (a bare run id
    is resolved through the tenant's run index: ``RunQueue.locate``)."""

    tenant: str
    session_id: str
    run_id: str


#: A trace context is a few short W3C headers; anything bigger is refused.
MAX_TRACE_HEADERS = 8
MAX_TRACE_BYTES = 4096
#: Validation messages name at most this many invalid fields, each location shortened.
_MAX_PROBLEMS = 5
TERMINAL_STATUSES = frozenset(
    {
        RunStatus.COMPLETED,
        RunStatus.WAITING,
        RunStatus.CONTINUATION_REQUIRED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
    }
)


class ParentLink(pydantic.BaseModel):
    """The run that spawned a child run (``ctx.spawn``), in the child's own tenant: where the
    child reports its end (the parent's children record) and how deep the family goes."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    session_id: str
    run_id: str
    call_id: str = Field(min_length=1, max_length=256)
    """The parent's call that spawned the child."""
    depth: int = Field(ge=1, le=1000)
    """The child's depth: 1 for a child of a run no one spawned."""
    detached: bool = False
    """A detached child is not cancelled with its parent."""

    @pydantic.field_validator("session_id", "run_id")
    @classmethod
    def _ids(cls, value: str, info: pydantic.ValidationInfo) -> str:
        return validate_id(value, kind=f"parent {(info.field_name or 'id').replace('_', ' ')}")


class RunRequest(RunOptions):
    """One request to run an agent on a session: the run's :class:`RunOptions` (their fields
    and validation come from there), with the ids, the input and what the producer adds."""

    v: Literal[1] = 1
    run_id: str
    request_id: str
    """Idempotency key (the producer makes it the run id when none is given)."""
    tenant: str = "default"
    session_id: str
    input: str | None
    resolutions: tuple[Resolution, ...] = Field(default=(), max_length=64)
    """Settle pending calls of the session's ``WAITING`` run first, then go on (input None)."""
    submitted_at_ms: int = Field(default_factory=now_ms, ge=0, le=2**53, strict=True)
    reply_to: str | None = None
    """The submitting producer's id: its completion is announced on that producer's own stream
    (:meth:`tether.keys.RedisKeys.producer_done`), so a producer reads only its own runs.
    Optional and omitted from the JSON when None."""
    trace: dict[str, str] | None = Field(default=None, max_length=MAX_TRACE_HEADERS)
    """W3C trace context of the submit (``traceparent``, ``tracestate``), so the worker's spans
    join the producer's trace (see :mod:`tether.observability.tracing`). Optional and omitted
    from the JSON when None: requests of a producer that does not trace are unchanged."""
    parent: ParentLink | None = None
    """The run that spawned this one (a child run, :mod:`tether.runtime.children`). Optional
    and omitted from the JSON when None."""

    @pydantic.field_validator("trace")
    @classmethod
    def _trace_size(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None and sum(len(k) + len(v) for k, v in value.items()) > MAX_TRACE_BYTES:
            raise ValueError(f"trace context is larger than {MAX_TRACE_BYTES} characters")
        if value is not None:
            check_json_tree(value, "trace")
        return value

    @pydantic.model_serializer(mode="wrap")
    def _omit_unset_optionals(
        self, handler: pydantic.SerializerFunctionWrapHandler
    ) -> dict[str, Any]:
        doc: dict[str, Any] = handler(self)
        for optional in ("trace", "reply_to", "webhook", "parent"):
            if doc.get(optional, 0) is None:
                del doc[optional]
        return doc

    @property
    def ref(self) -> RunRef:
        """Where this run lives."""
        return RunRef(self.tenant, self.session_id, self.run_id)

    @pydantic.field_validator("run_id", "session_id")
    @classmethod
    def _ids(cls, value: str, info: pydantic.ValidationInfo) -> str:
        return validate_id(value, kind=(info.field_name or "id").replace("_", " "))

    @pydantic.field_validator("reply_to")
    @classmethod
    def _reply_to(cls, value: str | None) -> str | None:
        return None if value is None else validate_id(value, kind="producer id")

    @pydantic.field_validator("input")
    @classmethod
    def _input(cls, value: str | None) -> str | None:
        if value is not None:
            check_text(value, "input")
        return value

    @pydantic.model_validator(mode="after")
    def _continuation(self) -> RunRequest:
        if self.resolutions and self.input is not None:
            raise ValueError("a request that settles pending calls takes no input (input=None)")
        return self

    def check_input_size(self, max_input_bytes: int) -> None:
        """Raise :class:`InputTooLarge` when the input exceeds the configured limit."""
        size = len((self.input or "").encode("utf-8", "surrogatepass"))
        if size > max_input_bytes:
            raise InputTooLarge(
                f"run {self.run_id!r}: input is {size} bytes, over the limit of {max_input_bytes}; "
                "send large material by reference or raise TETHER_MAX_INPUT_BYTES"
            )


def describe_request(request: RunRequest) -> str:
    """What Flower, ``celery inspect active`` and logs show for a run message: the run, its
    session, tenant and agent; never the input (it may be large or private)."""
    return (
        f"{{'request': <{request.run_id} on {request.tenant}/{request.session_id} "
        f"agent={request.agent}>}}"
    )


def describe_drain(tenant: str, session_id: str, run_id: str | None) -> str:
    """What Celery's tools show for a drain message: the session and the run it will apply."""
    head = f" next={run_id}" if run_id else ""
    return f"{{'session': <{tenant}/{session_id}{head}>}}"


@dataclass(frozen=True, slots=True)
class WireRequest:
    """A validated run request with its JSON text: what a run record and a run message hold.

    Made by :meth:`of` (a producer serializes its request once) or :func:`parse_wire` (a
    worker keeps the text the message carried), so the same text goes to Redis and to the
    broker, and the worker can tell the registered copy is the one it validated by comparing
    texts (see the module docstring).
    """

    request: RunRequest
    text: str
    """``request`` as JSON: it validates back into ``request``."""

    @classmethod
    def of(cls, request: RunRequest | WireRequest) -> WireRequest:
        """``request`` with its JSON (serialized here, once, unless it comes with it)."""
        if isinstance(request, WireRequest):
            return request
        return cls(request, request.model_dump_json())


def parse_request(doc: Any) -> RunRequest:
    """Validate an untrusted request document.

    Raises:
        InvalidInput: naming every invalid field.
    """
    return _validated(RunRequest.model_validate, doc)


def wake_ref(body: Any) -> RunRef:
    """The run a run message names, from its ids alone (JSON text or an object): what a worker
    that acts only on registered runs reads of a message, which then runs the registered copy
    (TETHER_REGISTERED_RUNS_ONLY). The ids are validated; nothing else of the message is.

    Raises:
        InvalidInput: the message names no valid tenant, session and run.
    """
    try:
        doc = json.loads(body) if isinstance(body, str | bytes) else body
        return RunRef(
            validate_tenant(doc.get("tenant", "default")),
            validate_id(doc.get("session_id")),
            validate_id(doc.get("run_id"), kind="run id"),
        )
    except (ValueError, AttributeError, InvalidId) as exc:
        raise InvalidInput(
            f"invalid run message: it names no valid tenant, session and run ({exc})"
        ) from exc


def parse_wire(body: Any) -> WireRequest:
    """Validate the request a run message carries: its JSON text (what producers send), or a
    JSON object (what producers before the text sent, and hand-made messages).

    The text is kept as it came, so the worker registers and compares the producer's own
    bytes; unless it leaves ``submitted_at_ms`` to its default (the time of reading, which would
    differ at every read), or it is an object: then the request is serialized here.

    Raises:
        InvalidInput: naming every invalid field, or the text's JSON error.
    """
    if isinstance(body, str):
        request = _validated(RunRequest.model_validate_json, body)
        if "submitted_at_ms" in request.model_fields_set:
            return WireRequest(request, body)
        return WireRequest.of(request)
    return WireRequest.of(parse_request(body))


def _validated(validate: Callable[[Any], RunRequest], doc: Any) -> RunRequest:
    """``validate(doc)``, its errors as one clear :class:`InvalidInput`."""
    try:
        return validate(doc)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{_where(e['loc'])}: {e['msg'][:300]}" for e in exc.errors()[:_MAX_PROBLEMS]
        )
        raise InvalidInput(f"invalid run request: {problems}") from exc
    except TetherError as exc:
        raise InvalidInput(f"invalid run request: {exc}") from exc


def _where(loc: tuple[int | str, ...]) -> str:
    """A field location for a message (a deep one is shortened, every part made printable)."""
    parts = [ascii(p)[1:-1] if isinstance(p, str) else str(p) for p in loc]
    if len(parts) > 6:
        parts = [*parts[:3], "...", *parts[-2:]]
    return ".".join(p[:40] for p in parts) or "request"


class RunResult(RunOutcome):
    """The recorded outcome of a distributed run."""

    v: Literal[1] = 1
    request_id: str
    session_id: str
    error_type: str | None = None
    error_message: str | None = None
    duplicate: bool = False
    attempts: int = 0
    queue_ms: int = 0
    run_ms: int = 0
    worker: str | None = None
    cost_usd: float | None = Field(default=None, exclude_if=lambda v: v is None)
    """What ``usage`` cost at the worker's ``TETHER_MODEL_PRICES`` (None: the run's model has no
    price, or it used no tokens). Omitted from the JSON when None, so results stay as older
    producers read them until prices are set (upgrade producers before setting them)."""

    @classmethod
    def failure(
        cls, request: RunRequest, status: RunStatus, error_type: str, message: str, **extra: Any
    ) -> RunResult:
        """The result of a run that failed or was cancelled without output (built only here)."""
        return cls(
            run_id=request.run_id,
            request_id=request.request_id,
            session_id=request.session_id,
            tenant=request.tenant,
            status=status,
            error_type=error_type,
            error_message=message,
            **extra,
        )

    @property
    def ref(self) -> RunRef:
        """Where this run lives."""
        return RunRef(self.tenant, self.session_id, self.run_id)

    @property
    def ok(self) -> bool:
        """True unless the run failed or was cancelled."""
        return self.status not in (RunStatus.FAILED, RunStatus.CANCELLED)

    def error(self) -> TetherError | None:
        """The recorded error as an exception of its original class (None when ok)."""
        if self.error_type is None:
            return None
        exc = error_from_record(self.error_type, self.error_message or "")
        exc.result = self  # type: ignore[attr-defined]
        return exc


__all__ = [
    "CANVAS_RUN_TASK",
    "DEFAULT_QUEUE",
    "DRAIN_TASK",
    "MAX_METADATA_BYTES",
    "RUN_TASK",
    "BusyPolicy",
    "ParentLink",
    "RedisKeys",
    "RunOptions",
    "RunRef",
    "RunRequest",
    "RunResult",
    "WireRequest",
    "canvas_run_id",
    "describe_drain",
    "describe_request",
    "parse_request",
    "parse_wire",
]
