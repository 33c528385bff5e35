"""Cancelling or waking a run parked on the fleet (sans-IO, for
:class:`~tether.producer.client.Producer` and its asyncio twin).

A run that parked a call on a timer (or a signal, or children) has ended ``WAITING``: there is
nothing running to stop. Its cancel is a continuation, registered like any run in the session's
queue, that settles each parked call with a ``Cancelled`` tool error and ends ``CANCELLED``
without a model call: durable in the session (so nothing wakes the call again, even after Redis
lost its index) and exactly once, because its request id is the call's wake id: whichever of the
wake and the cancel is registered first is the one applied, the other a duplicate.

A wake (``Producer.wake``) is what the fleet would submit at the call's wake time, submitted
now (:mod:`tether.runs.waits.wakes`): the same ids, so an operator racing the sweeper, a signal
or a second click is applied once. It reads the session's wait records and its family record
in one round trip, in the session's own keyspace (another tenant's credential is refused there,
nothing written), and submits each wake like any run, registered in the session's queue
(``TETHER_REGISTERED_RUNS_ONLY`` holds), on the queue of the workers serving its agent.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from tether.core.results import Resolution, RunStatus
from tether.errors import InvalidInput
from tether.ids import validate_id, validate_tenant
from tether.keys import RedisKeys
from tether.producer.submission import Submitted
from tether.runs.contract import BusyPolicy, RunRequest, WireRequest
from tether.runs.queue.base import RunView, SubmitState
from tether.runs.waits.base import WaitRecord, settle_request
from tether.runs.waits.children_redis import family_key, parse_family
from tether.runs.waits.wakes import wake_now
from tether.settings import Settings


def cancel_requests(view: RunView | None, reply_to: str | None) -> list[RunRequest]:
    """The continuations cancelling the calls ``view``'s run parked on the fleet (none: the run
    is not ``WAITING`` on the fleet)."""
    result = view.result if view is not None else None
    if view is None or result is None or result.status is not RunStatus.WAITING:
        return []
    agent = view.request.agent if view.request is not None else None
    if agent is None:
        return []
    return [
        settle_request(
            view.tenant,
            view.session_id,
            agent,
            Resolution(call_id=p.call_id, action="cancel", text="cancelled by a person"),
            reply_to=reply_to,
        )
        for p in result.pending
        if p.wait_for is not None
    ]


# --- waking a parked call now -------------------------------------------------------------------


class WokenCall(NamedTuple):
    """One parked call ``Producer.wake`` woke."""

    call_id: str
    run_id: str
    """The wake's run id (derived from the call: the fleet's own wake is the same run)."""
    waited_for: str
    """What it waited for (``timer``, ``signal``, ``children``)."""
    duplicate: bool
    """Its wake had been submitted already (by the fleet, a signal, another operator): that
    one is the run that goes on; nothing was added."""


class WakeTarget(NamedTuple):
    """A checked wake: whose session, which call (None: every parked call)."""

    tenant: str
    session_id: str
    call_id: str | None


def wake_target(
    settings: Settings, session_id: str, call_id: str | None, tenant: str | None
) -> WakeTarget:
    """The checked target of a wake (no I/O).

    Raises:
        InvalidInput: a malformed session id or tenant, or an empty call id.
    """
    tenant = validate_tenant(settings.tenant if tenant is None else tenant)
    validate_id(session_id)
    if call_id is not None and not call_id.strip():
        raise InvalidInput("--call is empty: give the call id the session's wait names")
    return WakeTarget(tenant, session_id, call_id)


def wake_keys(keys: RedisKeys, target: WakeTarget) -> tuple[str, str]:
    """The session's wait records and its family record (one slot: one pipeline reads both)."""
    t, s = target.tenant, target.session_id
    return keys.session_waits(t, s), family_key(keys, t, s)


def parse_records(raw_records: list[Any]) -> list[WaitRecord]:
    """A session's wait records as read (``HVALS`` of its waits hash), in call id order."""
    return sorted(
        (WaitRecord.model_validate_json(raw) for raw in raw_records), key=lambda r: r.call_id
    )


def wake_plan(
    target: WakeTarget, raw_records: list[Any], raw_family: dict[Any, Any], woke_at_ms: int
) -> list[tuple[WaitRecord, RunRequest]]:
    """The wakes to submit: for each parked call (or the one named), what the fleet would
    submit at its wake time (:func:`~tether.runs.waits.wakes.wake_now`).

    Raises:
        InvalidInput: nothing of the session waits on the fleet (or not the call named).
    """
    records = parse_records(raw_records)
    chosen = [r for r in records if target.call_id in (None, r.call_id)]
    if not chosen:
        raise InvalidInput(_nothing_waits(target, [r.call_id for r in records]))
    ended = parse_family(raw_family).ended
    return [(r, wake_now(r, woke_at_ms, ended)) for r in chosen]


def _nothing_waits(target: WakeTarget, parked: list[str]) -> str:
    where = f"session {target.session_id!r} of tenant {target.tenant!r}"
    if parked:
        return (
            f"{where} has no call {target.call_id!r} parked on the fleet; its parked calls: "
            f"{', '.join(parked)} (or leave --call out to wake them all)"
        )
    return (
        f"nothing of {where} waits on the fleet (a timer, a signal or children) to wake: "
        f"`tether status` lists the runs that wait and for what, `tether sessions show "
        f"{target.session_id}` the session's last runs (a run waiting for an approval or an "
        "output goes on with `tether approve` / `tether answer`)"
    )


def woken(plan: list[tuple[WaitRecord, RunRequest]], submitted: list[Submitted]) -> list[WokenCall]:
    """What the wake did, per call of ``plan``, from the queue's answers (``submitted``, in any
    order: the plan's queues were submitted one after the other)."""
    duplicate = {s.request.run_id: s.outcome.state is SubmitState.DUPLICATE for s in submitted}
    return [
        WokenCall(record.call_id, request.run_id, record.wait_for.kind, duplicate[request.run_id])
        for record, request in plan
    ]


def by_queue(
    plan: list[tuple[WaitRecord, RunRequest]], default: str
) -> dict[str, list[WireRequest]]:
    """The wakes to submit, by the queue of the workers serving each call's agent (its record's,
    as the sweeper submits it)."""
    queues: dict[str, list[WireRequest]] = {}
    for record, request in plan:
        queues.setdefault(record.queue or default, []).append(WireRequest.of(request))
    return queues


# --- a newer run superseding a run parked on the fleet ------------------------------------------


def superseding(requests: list[WireRequest]) -> list[RunRequest]:
    """The requests that stop their session's run (``on_busy`` interrupt or rollback), one per
    session (the first: the calls it settles are settled once)."""
    found: dict[tuple[str, str], RunRequest] = {}
    for wire in requests:
        r = wire.request
        if r.on_busy in (BusyPolicy.INTERRUPT, BusyPolicy.ROLLBACK) and not r.resolutions:
            found.setdefault((r.tenant, r.session_id), r)
    return list(found.values())


def supersede_plan(
    newer: RunRequest, raw_records: list[Any]
) -> list[tuple[WaitRecord, RunRequest]]:
    """The continuations that settle the calls ``newer``'s session has parked on the fleet
    before ``newer`` runs: ``interrupt`` (the parked run ends ``INTERRUPTED``, its steps kept)
    or, for ``rollback``, ``cancel`` (it ends ``CANCELLED``; a parked run has committed its
    steps, so they stay, as with ``Producer.cancel``). Each has the call's wake id, so a wake
    racing it, or a second newer run, is the one dropped."""
    action: Literal["interrupt", "cancel"] = (
        "interrupt" if newer.on_busy is BusyPolicy.INTERRUPT else "cancel"
    )
    why = f"superseded by run {newer.run_id} (on_busy='{newer.on_busy.value}')"
    records = parse_records(raw_records)
    return [
        (
            r,
            settle_request(
                r.tenant,
                r.session_id,
                r.agent,
                Resolution(call_id=r.call_id, action=action, text=why),
                reply_to=r.reply_to,
            ),
        )
        for r in records
    ]
