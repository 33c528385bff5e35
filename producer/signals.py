"""Sending a signal to a session (sans-IO, for :class:`~tether.producer.client.Producer` and its
asyncio twin).

``signal(session_id, name, payload)`` checks the signal before any I/O (a valid id and name, a
JSON payload within ``TETHER_MAX_INPUT_BYTES``, credentials masked like an input's when
``TETHER_REDACT_INPUTS``), appends it to the session's mailbox, in the session's own keyspace
(:mod:`tether.runs.signals`: with per-tenant Redis users, another tenant's credential is refused
there and nothing is written), and, when a call of the session waits for that name, submits its
wake like any run: registered in the session's queue, with ids derived from the call, so it
is applied once whoever else submits it.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from tether.core.events import now_ms
from tether.ids import validate_id, validate_tenant
from tether.runs.contract import RunRequest, WireRequest
from tether.runs.signals.base import SignalSent, signal_payload, wake_of
from tether.settings import Settings


class SignalPlan(NamedTuple):
    """A checked signal, ready to send."""

    tenant: str
    session_id: str
    name: str
    payload_json: str
    sent_at_ms: int


class SignalReceipt(NamedTuple):
    """What ``Producer.signal`` did."""

    signal_id: str
    """The signal's id in the session's mailbox (ids grow in send order)."""
    woke_run_id: str | None
    """The run id of the wake it submitted (None: no call of the session waited for that name;
    the signal waits in the mailbox for the next ``wait_for_signal``)."""


def signal_plan(
    settings: Settings, session_id: str, name: str, payload: object, tenant: str | None
) -> SignalPlan:
    """The checked signal (no I/O).

    Raises:
        InvalidInput: a malformed id or name, a payload that is not JSON or over the limit.
    """
    tenant = validate_tenant(settings.tenant if tenant is None else tenant)
    validate_id(session_id)
    text = signal_payload(
        name, payload, max_bytes=settings.max_input_bytes, redact=settings.redact_inputs
    )
    return SignalPlan(tenant, session_id, name, text, now_ms())


def signal_wake(sent: SignalSent, plan: SignalPlan) -> list[WireRequest]:
    """The wake to submit after the send (none: nobody waits for that name)."""
    wake: RunRequest | None = wake_of(sent, plan.name)
    return [] if wake is None else [WireRequest.of(wake)]


def receipt(sent: SignalSent, wakes: list[WireRequest]) -> SignalReceipt:
    """What the send did."""
    return SignalReceipt(sent.signal_id, wakes[0].request.run_id if wakes else None)


def parse_payload(text: str | None, where: str = "PAYLOAD-JSON") -> object:
    """A signal's payload from its JSON text (None: no payload); ``where`` names the text in
    the error (the CLI's argument, the file it was read from, the console's field).

    Raises:
        InvalidInput: text that is not JSON.
    """
    from tether.errors import InvalidInput

    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidInput(
            f"{where} is not JSON ({exc}); quote a string payload as JSON, e.g. '\"yes\"'"
        ) from None
