"""The sans-IO core of the producers: what :class:`~tether.producer.client.Producer` (blocking)
and :class:`~tether.producer.aio.AsyncProducer` (asyncio) share.

Everything here is pure: building and validating run requests, planning what a submission does
with the run queue's answer, the Celery message of a run, and decoding a recorded
:class:`RunResult` into what a handle resolves to. The two producers are thin shells that do the
I/O (redis-py or ``redis.asyncio``, and a Celery publish) around these functions, so they
behave the same by construction.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, Unpack

from tether.core.results import Resolution, RunStatus
from tether.errors import PermissionDenied, RunNotFound, SessionBusy
from tether.ids import new_id, validate_id, validate_tenant
from tether.observability.tracing import current_trace_context
from tether.runs.contract import (
    RUN_TASK,
    RunRef,
    RunRequest,
    RunResult,
    WireRequest,
    describe_request,
    parse_request,
)
from tether.runs.options import RunExtras, RunOptionsKwargs, check_options
from tether.runs.queue.base import RunView, StopMode, SubmitOutcome, SubmitState
from tether.runtime.redaction import mask_input, mask_metadata
from tether.settings import Settings


@dataclass(frozen=True, init=False)
class RunSpec:
    """One run for :meth:`Producer.submit_many` (and :meth:`AsyncProducer.submit_many`):
    ``RunSpec("s-1", "hi", "echo", timeout_s=5)`` takes the options of ``run_async``
    (:class:`~tether.runs.options.RunOptions`), kept as given: :func:`build_request` validates
    them with the request they make."""

    session_id: str
    input: str | None
    options: RunOptionsKwargs
    """The run's options, its agent included."""
    resolutions: tuple[Resolution, ...] = ()
    """The pending calls a continuation settles (:func:`resolution_spec`)."""

    def __init__(
        self,
        session_id: str,
        input: str | None,
        agent: str,
        *,
        resolutions: Iterable[Resolution] = (),
        **options: Unpack[RunExtras],
    ) -> None:
        check_options(options)
        object.__setattr__(self, "session_id", session_id)
        object.__setattr__(self, "input", input)
        object.__setattr__(self, "options", RunOptionsKwargs(agent=agent, **options))
        object.__setattr__(self, "resolutions", tuple(resolutions))


def run_spec(session_id: str, input: str | None, **options: Unpack[RunOptionsKwargs]) -> RunSpec:
    """The spec of ``run_async``'s arguments (validated later, by :func:`build_request`).

    Raises:
        TypeError: a keyword that is no run option.
    """
    return RunSpec(session_id, input, **options)


def resolution_spec(
    session_id: str, resolutions: Iterable[Resolution], **options: Unpack[RunOptionsKwargs]
) -> RunSpec:
    """The spec of a continuation that settles a ``WAITING`` run's pending calls."""
    return RunSpec(session_id, None, resolutions=resolutions, **options)


def approval(call_id: str) -> Resolution:
    """Approve a pending call: the tool runs, then the run goes on."""
    return Resolution(call_id=call_id, action="approve")


def rejection(call_id: str, reason: str) -> Resolution:
    """Refuse a pending call: the model sees ``reason``."""
    return Resolution(call_id=call_id, action="reject", text=reason)


def tool_output(call_id: str, output: str) -> Resolution:
    """The output of a call that waits for one."""
    return Resolution(call_id=call_id, action="output", text=output)


def _masked(settings: Settings, metadata: object) -> object:
    # metadata and settled texts are stored like inputs (the run record, the head)
    return mask_metadata(metadata) if settings.redact_inputs else metadata


def _redacted_resolution(resolution: Resolution) -> dict[str, object]:
    doc = resolution.model_dump()
    return {**doc, "text": mask_input(doc["text"])}


def build_request(settings: Settings, spec: RunSpec, reply_to: str | None = None) -> RunRequest:
    """Validate ``spec`` into a request with a fresh run id (no I/O); its completion is
    announced to producer ``reply_to``. The only validation a request gets in the producer.

    Raises:
        InvalidInput: a malformed id, oversized input, or bad option.
    """
    run_id = new_id("run")
    options = spec.options
    tenant, request_id, metadata = (
        options.get("tenant"),
        options.get("request_id"),
        options.get("metadata"),
    )
    doc = {
        **options,  # as given: RunRequest validates each, never coerces (dict("ab") would)
        "run_id": run_id,
        "request_id": run_id if request_id is None else request_id,
        "tenant": settings.tenant if tenant is None else tenant,
        "session_id": spec.session_id,
        # a secret pasted into an input never reaches the run record, the broker or the log
        "input": mask_input(spec.input) if settings.redact_inputs else spec.input,
        "metadata": {} if metadata is None else _masked(settings, metadata),
        "resolutions": [
            _redacted_resolution(r) if settings.redact_inputs else r.model_dump()
            for r in spec.resolutions
        ],
        "trace": current_trace_context(),  # the worker's spans continue this trace
        "reply_to": reply_to,
    }
    request = parse_request(doc)
    request.check_input_size(settings.max_input_bytes)
    return request


@contextlib.contextmanager
def acting_for(settings: Settings, tenants: Iterable[str]) -> Iterator[None]:
    """Say "this credential may not act for tenant X" when Redis refuses a command for a
    tenant other than the producer's own (with per-tenant users, granting more permissions
    is never the fix: using that tenant's own credential is)."""
    try:
        yield
    except PermissionDenied as exc:
        foreign = sorted({t for t in tenants if t != settings.tenant})
        if not foreign:
            raise
        names = ", ".join(repr(t) for t in foreign)
        raise PermissionDenied(
            f"Redis denied this credential acting for tenant {names} ({exc.__cause__ or exc}): "
            f"this producer's credential may not act for that tenant (with per-tenant Redis "
            f"users each credential is limited to its own tenant's keys, docs/trust-model.md); "
            f"use that tenant's own credential (TETHER_REDIS_URL), or submit for "
            f"{settings.tenant!r}"
        ) from exc


T = TypeVar("T")


def acting_for_each(settings: Settings, tenant: str, items: Iterator[T]) -> Iterator[T]:
    """``items`` (a tail: it reads Redis as it is iterated) under :func:`acting_for`
    ``tenant``, around every read rather than around building it."""
    with acting_for(settings, [tenant]):
        yield from items


async def acting_for_each_async(
    settings: Settings, tenant: str, items: AsyncIterator[T]
) -> AsyncIterator[T]:
    """:func:`acting_for_each` for an asyncio tail."""
    with acting_for(settings, [tenant]):
        async for item in items:
            yield item


def build_requests(
    settings: Settings, specs: Iterable[RunSpec], reply_to: str | None = None
) -> list[WireRequest]:
    """:func:`build_request` for each spec, each serialized once: the text both the run record
    and the run message carry (see :class:`~tether.runs.contract.WireRequest`).

    A request with a webhook also has its destination checked (a DNS lookup: the one I/O here,
    only for those) and its tenant's signing secret.

    Raises:
        InvalidInput: as :func:`build_request`, for the first bad spec (none is returned), or a
            refused webhook address.
        ConfigurationError: a webhook without a signing secret for its tenant.
    """
    built = [WireRequest.of(build_request(settings, spec, reply_to)) for spec in specs]
    for wire in built:
        if wire.request.webhook is not None:
            from tether.runs.webhooks.addresses import check_webhook

            check_webhook(settings, wire.request.webhook, wire.request.tenant)
    return built


@dataclass(frozen=True)
class Submitted:
    """What the producer does after the run queue answered one submission."""

    wire: WireRequest
    outcome: SubmitOutcome
    rejection: RunResult | None
    """The failed result to record (a busy session with ``on_busy='reject'``), else None."""

    @property
    def request(self) -> RunRequest:
        """The request submitted."""
        return self.wire.request

    @property
    def run_id(self) -> str:
        """The run the handle follows (the first run of a duplicate request id)."""
        return self.outcome.run_id

    @property
    def queued(self) -> bool:
        """The request entered its session queue: publish it and apply its busy policy."""
        return self.outcome.state is SubmitState.QUEUED

    @property
    def stop_mode(self) -> StopMode | None:
        """How the session's running run is asked to stop for this one (None: it is not)."""
        if not self.queued:
            return None
        return {"interrupt": StopMode.INTERRUPT, "rollback": StopMode.CANCEL}.get(
            self.request.on_busy.value
        )


def plan_submission(
    requests: Sequence[WireRequest], outcomes: Sequence[SubmitOutcome]
) -> list[Submitted]:
    """Pair each request with the queue's answer and what follows from it."""
    return [
        Submitted(w, o, busy_rejection(w.request) if o.state is SubmitState.BUSY else None)
        for w, o in zip(requests, outcomes, strict=True)
    ]


def busy_rejection(request: RunRequest) -> RunResult:
    """The failed result of a run refused because its session was busy."""
    busy = SessionBusy(
        f"session {request.tenant}/{request.session_id} is running or has queued runs, "
        "and on_busy='reject' was asked; retry later or use on_busy='enqueue'"
    )
    return RunResult.failure(request, RunStatus.FAILED, busy.error_type, str(busy))


def run_message(wire: WireRequest, queue: str, *, wake_only: bool = False) -> dict[str, Any]:
    """The keyword arguments of ``Celery.send_task`` for a run message: it carries the
    request's JSON text, the same text the run record holds (no second serialization).

    ``wake_only`` (``TETHER_REGISTERED_RUNS_ONLY``): the message carries the run's ids and
    agent and nothing else (no input, metadata, resolutions or webhook). A worker in that mode
    runs the registered copy and reads only the ids, and every tenant that submits can read the
    broker's queues, so the text of a run stays in its tenant's keyspace."""
    if wake_only:
        wire = wake_up(wire.request)
    request = wire.request
    return {
        "name": RUN_TASK,
        "kwargs": {"request": wire.text},
        "task_id": request.run_id,
        "queue": queue,
        # a short repr: Celery would otherwise render the whole request (input included) into
        # the message headers
        "argsrepr": "()",
        "kwargsrepr": describe_request(request),
        # no result is stored for a run message (a result backend would subscribe per run)
        "ignore_result": True,
    }


def wake_up(request: RunRequest) -> WireRequest:
    """The run message's request in registered-only mode: the ids, the agent and when it was
    submitted (see :func:`run_message`)."""
    return WireRequest.of(
        RunRequest(
            run_id=request.run_id,
            request_id=request.request_id,
            tenant=request.tenant,
            session_id=request.session_id,
            agent=request.agent,
            input=None,
            submitted_at_ms=request.submitted_at_ms,
        )
    )


def run_id_arg(run_id: str) -> str:
    """Validate a run id given by a caller."""
    return validate_id(run_id, kind="run id")


def tail_target(settings: Settings, session_id: str, tenant: str | None) -> tuple[str, str]:
    """``(tenant, session_id)`` of a tail, validated (the tenant defaults to the settings')."""
    return validate_tenant(tenant or settings.tenant), validate_id(session_id)


# --- what a handle resolves to ----------------------------------------------------------------


@dataclass
class RunIds:
    """The ids a handle knows of its run (all but ``run_id`` are unknown for a handle
    reattached by run id, until its record or result is read)."""

    run_id: str
    request_id: str | None = None
    session_id: str | None = None
    tenant: str | None = None

    @property
    def known(self) -> bool:
        """Whether the session is known."""
        return self.session_id is not None

    def ref(self) -> RunRef | None:
        """Where the run lives, when the session and tenant are known."""
        if self.session_id is None or self.tenant is None:
            return None
        return RunRef(self.tenant, self.session_id, self.run_id)

    def foreign(self, tenant: str | None) -> bool:
        """Whether a record of ``tenant`` belongs to another tenant than the caller's: then the
        run is "not found" for this handle (an id never reveals another tenant's run)."""
        return bool(self.tenant and tenant and tenant != self.tenant)

    def learn(self, request_id: str, session_id: str, tenant: str) -> None:
        """Fill in ids read from the run's record or result (known ones are kept; another
        tenant's record teaches nothing)."""
        if self.foreign(tenant):
            return
        self.request_id = self.request_id or request_id or None
        self.session_id = self.session_id or session_id or None
        self.tenant = self.tenant or tenant or None

    def complete(self, result: RunResult) -> RunResult:
        """``result`` with the ids it lacks filled in (a result made up by the listener for a
        lost run carries none), and learn the ids it has; another tenant's result becomes
        :func:`not_found`."""
        if self.foreign(result.tenant):
            return not_found(self.run_id, self.tenant or "")
        known = {
            "request_id": self.request_id,
            "session_id": self.session_id,
            "tenant": self.tenant,
        }
        missing = {k: v for k, v in known.items() if v and not getattr(result, k)}
        if missing:
            result = result.model_copy(update=missing)
        self.learn(result.request_id, result.session_id, result.tenant)
        return result


def not_found(run_id: str, tenant: str) -> RunResult:
    """The result a handle settles with for a run its tenant cannot see (nothing of the real
    record: no output, no session)."""
    return RunResult(
        run_id=run_id,
        request_id="",
        session_id="",
        tenant=tenant,
        status=RunStatus.FAILED,
        error_type=RunNotFound.__name__,
        error_message=(
            f"run {run_id} not found for tenant {tenant!r}; check the run id and the tenant "
            "(`--tenant`, or the producer's TETHER_TENANT)"
        ),
    )


def scoped_view(view: RunView | None, tenant: str) -> RunView | None:
    """``view`` when it belongs to ``tenant``, else None (another tenant's run is not found)."""
    return view if view is not None and view.tenant == tenant else None


def is_cancelled(result: RunResult) -> bool:
    """Whether the run ended cancelled (the handle is then a cancelled future)."""
    return result.status is RunStatus.CANCELLED


def failure_of(result: RunResult) -> BaseException | None:
    """The exception a handle raises for a failed run (its ``.result`` is the RunResult)."""
    if result.status is not RunStatus.FAILED:
        return None
    return result.error() or RuntimeError(result.error_message)


def cancelled_error(run_id: str) -> concurrent.futures.CancelledError:
    """What waiting on a cancelled run raises."""
    return concurrent.futures.CancelledError(f"run {run_id} was cancelled")


def outcome(result: RunResult) -> RunResult:
    """What waiting returns for ``result``: the result itself, or the run's error raised."""
    if is_cancelled(result):
        raise cancelled_error(result.run_id)
    error = failure_of(result)
    if error is not None:
        raise error
    return result


def cancelled_before_start(ids: RunIds) -> RunResult:
    """The result a handle gives once its own cancel stopped the run before it started (the
    worker records the same when it reaches the run)."""
    return RunResult(
        run_id=ids.run_id,
        request_id=ids.request_id or "",
        session_id=ids.session_id or "",
        tenant=ids.tenant or "",
        status=RunStatus.CANCELLED,
        error_type="RunCancelled",
        error_message="cancelled before it started",
    )
