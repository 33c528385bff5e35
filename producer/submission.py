"""The sans-IO core of submitting runs: what :class:`~tether.producer.client.Producer`
(blocking) and :class:`~tether.producer.client_aio.AsyncProducer` (asyncio) share.

Everything here is pure: building and validating run requests, the budget checks a submission
needs and what their verdicts mean, planning what a submission does with the run queue's
answer (preempt, publish, record a refusal), the Celery message of a run, and the message of a
run published again. The two producers are thin shells that do the I/O (redis-py or
``redis.asyncio``, and a Celery publish) around these functions, so they behave the same by
construction; what they hold without I/O is :class:`~tether.producer.base.ProducerBase`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, Unpack

from tether.core.results import Resolution, RunStatus
from tether.errors import ConfigurationError, InvalidInput, PermissionDenied, SessionBusy
from tether.ids import new_id, validate_id, validate_tenant
from tether.observability.tracing import current_trace_context
from tether.runs.contract import (
    RUN_TASK,
    RunRequest,
    RunResult,
    WireRequest,
    describe_request,
    parse_request,
    parse_wire,
)
from tether.runs.options import RunExtras, RunOptionsKwargs, check_options
from tether.runs.queue.base import RunView, StopMode, SubmitOutcome, SubmitState
from tether.runs.usage.base import Verdict, exceeded, utc_day
from tether.runs.usage.policy import budgeted
from tether.runtime.redaction import mask_input, mask_metadata
from tether.settings import Settings
from tether.settings.budgets import TenantBudget

#: The W3C trace context a request carries (``traceparent``, ``tracestate``).
TraceContext = dict[str, str]
#: ``trace=`` of :func:`build_request`: the context of the span current where it is called.
CURRENT_TRACE: Literal["current"] = "current"
#: The keyword arguments of ``Celery.send_task`` for one run message.
Message = dict[str, Any]


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


def build_request(
    settings: Settings,
    spec: RunSpec,
    reply_to: str | None = None,
    *,
    trace: TraceContext | Literal["current"] | None = CURRENT_TRACE,
) -> RunRequest:
    """Validate ``spec`` into a request with a fresh run id (no I/O); its completion is
    announced to producer ``reply_to``. The only validation a request gets in the producer.

    ``trace``: the trace context the worker's spans continue (default: the current span's; the
    asyncio producer builds requests away from its callers, so it passes each caller's).

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
        "trace": current_trace_context() if trace == CURRENT_TRACE else trace,
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


async def async_acting_for_each(
    settings: Settings, tenant: str, items: AsyncIterator[T]
) -> AsyncIterator[T]:
    """:func:`acting_for_each` for an asyncio tail."""
    with acting_for(settings, [tenant]):
        async for item in items:
            yield item


def build_requests(
    settings: Settings,
    specs: Iterable[RunSpec],
    reply_to: str | None = None,
    *,
    trace: TraceContext | Literal["current"] | None = CURRENT_TRACE,
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
    built = [WireRequest.of(build_request(settings, s, reply_to, trace=trace)) for s in specs]
    for wire in built:
        if wire.request.webhook is not None:
            from tether.runs.webhooks.addresses import check_webhook

            check_webhook(settings, wire.request.webhook, wire.request.tenant)
    return built


def budget_checks(
    settings: Settings, requests: Sequence[WireRequest]
) -> list[tuple[str, TenantBudget, int]]:
    """The budget checks a submission needs before anything is queued: each tenant among
    ``requests`` that has a budget, with it and its run count (none without budgets, so no
    Redis command either)."""
    return budgeted(settings, [w.request for w in requests])


def check_verdict(tenant: str, budget: TenantBudget, verdict: Verdict) -> None:
    """Refuse the submission when ``tenant`` is over ``budget`` (see
    :meth:`~tether.runs.usage.base.TenantUsage.admit`).

    Raises:
        BudgetExceeded: naming the tenant, the budget, the use and when it resets.
    """
    if not verdict.admitted:
        raise exceeded(tenant, budget, verdict, utc_day())


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


def preemptions(submitted: Sequence[Submitted]) -> list[tuple[str, str, str, StopMode]]:
    """``(tenant, session_id, run_id, mode)`` of each queued run whose session's running run
    is asked to stop (``on_busy`` interrupt or rollback), for the queue's ``preempt``."""
    return [
        (s.request.tenant, s.request.session_id, s.run_id, mode)
        for s in submitted
        if (mode := s.stop_mode) is not None
    ]


def run_messages(
    settings: Settings, submitted: Sequence[Submitted], queue: str | None = None
) -> list[Message]:
    """The run messages to publish: one per run this submission queued, on ``queue`` (default:
    the settings')."""
    return [message_of(settings, s.wire, queue) for s in submitted if s.queued]


def rejections(submitted: Sequence[Submitted]) -> list[RunResult]:
    """The failed results to record (runs refused because their session was busy)."""
    return [s.rejection for s in submitted if s.rejection is not None]


def busy_rejection(request: RunRequest) -> RunResult:
    """The failed result of a run refused because its session was busy."""
    busy = SessionBusy(
        f"session {request.tenant}/{request.session_id} is running or has queued runs, "
        "and on_busy='reject' was asked; retry later or use on_busy='enqueue'"
    )
    return RunResult.failure(request, RunStatus.FAILED, busy.error_type, str(busy))


def run_message(wire: WireRequest, queue: str, *, wake_only: bool = False) -> Message:
    """The keyword arguments of ``Celery.send_task`` for a run message: it carries the
    request's JSON text, the same text the run record holds (no second serialization).

    ``wake_only`` (``TETHER_REGISTERED_RUNS_ONLY``): the message carries the run's ids and
    agent and nothing else (no input, metadata, resolutions or webhook). A worker in that mode
    runs the registered copy and reads only the ids, and every tenant that submits can read the
    broker's queues, so the text of a run stays in its tenant's keyspace."""
    request = wire.request
    return {
        "name": RUN_TASK,
        "kwargs": {"request": wake_up(request) if wake_only else wire.text},
        "task_id": request.run_id,
        "queue": queue,
        # a short repr: Celery would otherwise render the whole request (input included) into
        # the message headers
        "argsrepr": "()",
        "kwargsrepr": describe_request(request),
        # no result is stored for a run message (a result backend would subscribe per run)
        "ignore_result": True,
    }


def message_of(settings: Settings, wire: WireRequest, queue: str | None = None) -> Message:
    """The run message of ``wire`` on ``queue`` (default: the settings'; only its ids with
    ``TETHER_REGISTERED_RUNS_ONLY``)."""
    return run_message(wire, queue or settings.queue, wake_only=settings.registered_runs_only)


def stored_request(run_id: str, view: RunView | None) -> WireRequest:
    """The request a run's record stores, to publish it again (``resubmit``).

    Raises:
        InvalidInput: the run is unknown, expired, or its record holds no readable request.
    """
    if view is None or view.request is None:
        raise InvalidInput(f"run {run_id!r} is unknown or expired; nothing to resubmit")
    return WireRequest.of(view.request)


def wake_up(request: RunRequest) -> str:
    """The run message's request in registered-only mode: the ids, the agent and when it was
    submitted (see :func:`run_message`), as JSON text built from the validated request's own
    values: it reads as a request, and costs no second validation or serialization."""
    return json.dumps(
        {
            "run_id": request.run_id,
            "request_id": request.request_id,
            "tenant": request.tenant,
            "session_id": request.session_id,
            "agent": request.agent,
            "input": None,
            "submitted_at_ms": request.submitted_at_ms,
        },
        separators=(",", ":"),
    )


def run_id_arg(run_id: str) -> str:
    """Validate a run id given by a caller."""
    return validate_id(run_id, kind="run id")


def tail_target(settings: Settings, session_id: str, tenant: str | None) -> tuple[str, str]:
    """``(tenant, session_id)`` of a tail, validated (the tenant defaults to the settings')."""
    return validate_tenant(tenant or settings.tenant), validate_id(session_id)


def scoped_view(view: RunView | None, tenant: str) -> RunView | None:
    """``view`` when it belongs to ``tenant``, else None (another tenant's run is not found)."""
    return view if view is not None and view.tenant == tenant else None


def refuse_trusting(settings: Settings, restricted: bool) -> None:
    """Refuse to run a producer with ``TETHER_REGISTERED_RUNS_ONLY=false`` when its Redis
    credential is ``restricted`` to its tenant (a probe of a namespace key answered NOPERM):
    that deployment has per-tenant users, and with the rule off its workers act on any
    tenant's word (docs/trust-model.md).

    Raises:
        ConfigurationError: naming the setting and what to do.
    """
    if restricted and not settings.registered_runs_only:
        raise ConfigurationError(
            "TETHER_REGISTERED_RUNS_ONLY is false, but this producer's Redis credential is "
            "restricted to its tenant (per-tenant ACL users): with the rule off, any tenant "
            "that can publish to the broker can act for another. Unset it (the default is "
            "true) on every producer and worker of this deployment"
        )


def hand_made(settings: Settings, body: Any) -> WireRequest:
    """The request of a hand-made ``tether.run`` message (its ``request`` argument: JSON text or
    an object), validated and masked as :func:`build_request` masks a producer's own, to be
    registered before the message is published (workers act only on registered runs).

    Raises:
        InvalidInput: naming every invalid field, or an oversized input.
    """
    request = parse_wire(body).request
    if settings.redact_inputs:
        masked = {
            "input": mask_input(request.input),
            "metadata": _masked(settings, request.metadata),
            "resolutions": [_redacted_resolution(r) for r in request.resolutions],
        }
        request = parse_request({**request.model_dump(mode="json"), **masked})
    request.check_input_size(settings.max_input_bytes)
    return WireRequest.of(request)
