"""The mailbox seam: signals sent to a session, kept in send order until a run consumes them.

A producer sends (:meth:`SignalMailbox.send`): the signal is appended to the session's mailbox
(in its own keyspace: its tenant's credential writes it, no other's), and in the same step the
session's wait records are read (:mod:`tether.runs.waits`). When a call of the session waits
for that name, the sender submits its wake (:func:`signal_wake`): the continuation whose ids
derive from the call alone (:func:`~tether.runs.waits.base.wake_request_id`), so the wake a
timeout, a second sender or the parking worker submits too is a duplicate the queue drops. The
worker that runs it settles the call with the first signal of that name the session has not
consumed (:mod:`tether.runtime.signals`), read then, not carried by the wake.

A worker that parks a call on a signal looks in the mailbox after it recorded the wait
(:mod:`tether.worker.engine.signal_wakes`): a signal sent while the run was parking is seen by
one of the two.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from pydantic import JsonValue

from tether.core.results import Resolution
from tether.errors import InputTooLarge, InvalidInput, ToolError
from tether.runs.contract import RunRequest
from tether.runs.waits.base import WaitRecord, settle_request
from tether.runtime.redaction import DEFAULT_REDACTOR, redact_tree
from tether.runtime.signals import Signal, check_name, stream_id_key

#: The most signals a session's mailbox holds unconsumed; a send beyond it is refused.
MAX_SIGNALS_PER_SESSION = 1000


class SignalSent(NamedTuple):
    """What a send did: the signal's id, and the session's wait records at that instant."""

    signal_id: str
    waiting: list[WaitRecord]


class SignalMailbox(Protocol):
    """The sessions' mailboxes."""

    def send(
        self, tenant: str, session_id: str, name: str, payload_json: str, *, sent_at_ms: int
    ) -> SignalSent:
        """Append a signal (its payload as checked JSON text) and read the session's waits.

        Raises:
            InvalidInput: the mailbox holds :data:`MAX_SIGNALS_PER_SESSION` already (nothing
                is written).
        """

    def first_after(
        self, tenant: str, session_id: str, name: str, after_id: str | None
    ) -> Signal | None:
        """The first signal named ``name`` after id ``after_id`` (None: from the start)."""

    def forget(self, tenant: str, session_id: str, consumed: dict[str, str]) -> None:
        """Drop signals the session consumed (``consumed``: the last id per name, committed)."""


def full_mailbox(tenant: str, session_id: str) -> InvalidInput:
    """The refusal of a send to a full mailbox."""
    return InvalidInput(
        f"the mailbox of session {tenant}/{session_id} holds {MAX_SIGNALS_PER_SESSION} signals "
        "no run has consumed (MAX_SIGNALS_PER_SESSION); nothing was sent: let the session's "
        "runs consume them (ctx.wait_for_signal) first"
    )


def signal_payload(name: object, payload: object, *, max_bytes: int, redact: bool) -> str:
    """``payload`` as the JSON text a mailbox stores: checked JSON, at most ``max_bytes``
    (``TETHER_MAX_INPUT_BYTES``, as a run's input), credentials masked like an input's when
    ``redact`` (``TETHER_REDACT_INPUTS``).

    Raises:
        InvalidInput: a bad name, a payload that is not JSON, or one over ``max_bytes``.
    """
    try:
        check_name(name)
    except ToolError as exc:
        raise InvalidInput(str(exc)) from None
    try:
        text = json.dumps(payload, allow_nan=False, ensure_ascii=False)
        value: JsonValue = json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput(
            f"the payload of signal {name!r} is not JSON ({exc}); send a JSON value: an "
            "object, a list, a string, a number, true, false or null"
        ) from None
    if redact:
        value = redact_tree(value, DEFAULT_REDACTOR)
        text = json.dumps(value, ensure_ascii=False)
    size = len(text.encode())
    if size > max_bytes:
        raise InputTooLarge(
            f"the payload of signal {name!r} is {size} bytes as JSON, over the limit of "
            f"{max_bytes} (TETHER_MAX_INPUT_BYTES); send less, or a reference to it"
        )
    return text


def waiting_for(records: Sequence[WaitRecord], name: str) -> WaitRecord | None:
    """The call a signal named ``name`` wakes: the first (by call id) of those waiting for it."""
    calls = [r for r in records if r.wait_for.kind == "signal" and r.wait_for.name == name]
    return min(calls, key=lambda r: r.call_id) if calls else None


def signal_wake(record: WaitRecord) -> RunRequest:
    """The continuation that settles ``record``'s call from the mailbox, and goes on."""
    resolution = Resolution(call_id=record.call_id, action="signal")
    return settle_request(
        record.tenant, record.session_id, record.agent, resolution, reply_to=record.reply_to
    )


def is_consumed(signal: Signal, consumed: dict[str, str]) -> bool:
    """Whether ``consumed`` (the last id per name) counts ``signal`` as consumed."""
    last = consumed.get(signal.name)
    return last is not None and stream_id_key(signal.id) <= stream_id_key(last)


def wake_of(sent: SignalSent, name: str) -> RunRequest | None:
    """The wake a send of signal ``name`` submits (None: no call of the session waits for it)."""
    record = waiting_for(sent.waiting, name)
    return None if record is None else signal_wake(record)
