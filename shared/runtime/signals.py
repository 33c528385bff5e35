"""Signals a tool waits for: the session's mailbox as a run reads it, and what it has consumed.

Outside callers send a session named signals (``Producer.signal``); they wait in the session's
mailbox (:mod:`tether.runs.signals`) in send order until a tool takes one. A tool takes the first
signal of a name it has not consumed yet with ``ctx.wait_for_signal(name, timeout_s)``: when one
is there its output is that signal at once; else the call parks on the fleet
(``WaitFor(kind="signal")``), the run ends ``WAITING`` and the signal's arrival (or the timeout)
wakes it.

What a session has consumed is recorded *with the session*, so a crash between taking a signal
and committing the run delivers it again to the retried run, and never twice to committed ones:

- the output the call gets (:func:`signal_output`) carries the signal's id (the settling event,
  ``TOOL_RESULT`` or ``TOOL_OUTPUT_REPLACED``, holds it);
- the session's metadata attribute :data:`CURSOR_KEY` holds, per name, the id of the last signal
  consumed (ids grow in send order), written into the head by the commit of the run that took
  it. A run resumed from a step checkpoint reads its own events back into it
  (:func:`advance_from_events`); a run rolled back restores it.

The worker sets the mailbox around a run (:func:`signal_reader`); with none (a session run
in-process, with no fleet) a wait for a signal parks, and ``session.submit_tool_output`` goes on.
"""

from __future__ import annotations

import contextvars
import json
import math
import re
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, JsonValue

from tether.core.events import AgentEvent, ToolOutputReplacedPayload, ToolResultPayload, now_ms
from tether.core.waits import WaitFor, iso_ms
from tether.errors import ToolError

#: The session metadata attribute of what it consumed: ``{name: last consumed signal id}``.
CURSOR_KEY = "tether.signals"
#: What a signal's name may be (it is a field of the mailbox and of the wait).
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")


class SessionState(Protocol):
    """What this module reads and writes of a session (an
    :class:`~tether.runtime.session.AgentSession`)."""

    @property
    def tenant(self) -> str: ...

    @property
    def session_id(self) -> str: ...

    def metadata_attribute(self, key: str) -> JsonValue: ...

    def put_runtime_metadata(self, key: str, value: JsonValue) -> None: ...


class Signal(BaseModel):
    """One signal of a session's mailbox."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    """Its id in the mailbox (a Redis stream id ``<ms>-<n>``: ids grow in send order)."""
    name: str
    payload: JsonValue
    sent_at_ms: int


class SignalReader(Protocol):
    """What a run reads of its session's mailbox."""

    def first_after(
        self, tenant: str, session_id: str, name: str, after_id: str | None
    ) -> Signal | None:
        """The first signal named ``name`` sent after the one with id ``after_id`` (None:
        from the start), or None."""


def stream_id_key(signal_id: str) -> tuple[int, int]:
    """A stream id as a sortable pair (``"12-3"`` -> ``(12, 3)``)."""
    ms, _, seq = signal_id.partition("-")
    return int(ms), int(seq or 0)


def check_name(name: object) -> str:
    """``name`` when it is a valid signal name.

    Raises:
        ToolError: it is not (the message says what a name may hold).
    """
    if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
        raise ToolError(
            f"signal name {name!r} is invalid: use 1-128 letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or digit"
        )
    return name


def signal_output(signal: Signal) -> str:
    """The output a waiting call gets: the signal, with its id (the record of its consumption)."""
    return json.dumps(
        {
            "signal": signal.name,
            "payload": signal.payload,
            "signal_id": signal.id,
            "sent_at": iso_ms(signal.sent_at_ms),
        },
        sort_keys=True,
    )


def timeout_output(name: str) -> str:
    """The output of a call whose wait for ``name`` timed out (a result, not an error)."""
    return json.dumps({"signal": name, "timed_out": True}, sort_keys=True)


def consumed_in(output: str) -> tuple[str, str] | None:
    """``(name, signal id)`` when ``output`` is a signal's delivery (:func:`signal_output`)."""
    if not output.startswith("{") or '"signal_id"' not in output:
        return None
    try:
        doc = json.loads(output)
    except ValueError:
        return None
    if isinstance(doc, dict) and isinstance(doc.get("signal"), str):
        signal_id = doc.get("signal_id")
        if isinstance(signal_id, str):
            return doc["signal"], signal_id
    return None


def cursor_of(session: SessionState) -> dict[str, str]:
    """What ``session`` consumed: the last signal id per name."""
    return cursor_in(session.metadata_attribute(CURSOR_KEY))


def cursor_in(value: JsonValue) -> dict[str, str]:
    """The cursor a session's :data:`CURSOR_KEY` attribute holds (``value``)."""
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def set_cursor(session: SessionState, cursor: dict[str, str]) -> None:
    """Record what ``session`` consumed (ids, not text: no redaction applies)."""
    session.put_runtime_metadata(CURSOR_KEY, dict(cursor))


def advance(cursor: dict[str, str], name: str, signal_id: str) -> bool:
    """Move ``cursor``'s ``name`` on to ``signal_id`` when it is later; True when it moved."""
    current = cursor.get(name)
    if current is not None and stream_id_key(current) >= stream_id_key(signal_id):
        return False
    cursor[name] = signal_id
    return True


def advance_from_events(session: SessionState, events: Iterable[AgentEvent]) -> None:
    """Count as consumed the signals ``events`` delivered (a run resumed from its checkpoint
    replayed them; the head it was rebuilt from predates them)."""
    cursor = cursor_of(session)
    moved = False
    for event in events:
        payload = event.payload
        output = (
            payload.item.output
            if isinstance(payload, ToolResultPayload)
            else payload.output
            if isinstance(payload, ToolOutputReplacedPayload)
            else None
        )
        found = consumed_in(output) if output is not None else None
        if found is not None:
            moved = advance(cursor, *found) or moved
    if moved:
        set_cursor(session, cursor)


_locks_guard = threading.Lock()
_locks: weakref.WeakValueDictionary[tuple[str, str], threading.Lock] = weakref.WeakValueDictionary()


def _session_lock(tenant: str, session_id: str) -> threading.Lock:
    """One lock per session in this process: a step's calls run in parallel, each with an
    inbox of its own, and two must not take the same signal."""
    with _locks_guard:
        lock = _locks.get((tenant, session_id))
        if lock is None:
            lock = _locks[(tenant, session_id)] = threading.Lock()
        return lock


class SignalInbox:
    """A run's access to its session's mailbox: takes signals in send order, once each."""

    def __init__(self, reader: SignalReader, session: SessionState) -> None:
        self._reader = reader
        self._session = session
        self._lock = _session_lock(session.tenant, session.session_id)

    def take(self, name: str) -> Signal | None:
        """The first signal named ``name`` this session has not consumed, now consumed."""
        with self._lock:
            cursor = cursor_of(self._session)
            signal = self._reader.first_after(
                self._session.tenant, self._session.session_id, name, cursor.get(name)
            )
            if signal is not None and advance(cursor, name, signal.id):
                set_cursor(self._session, cursor)
            return signal


_reader: contextvars.ContextVar[SignalReader | None] = contextvars.ContextVar(
    "tether_signal_reader", default=None
)


@contextmanager
def signal_reader(reader: SignalReader | None) -> Iterator[None]:
    """Within this block, tools of runs started here read signals from ``reader``."""
    token = _reader.set(reader)
    try:
        yield
    finally:
        _reader.reset(token)


def inbox_fields(session: SessionState) -> dict[str, Any]:
    """The :class:`~tether.runtime.tools.ToolContext` field of the mailbox in force (none
    outside :func:`signal_reader`)."""
    reader = _reader.get()
    return {} if reader is None else {"signals": SignalInbox(reader, session)}


def signal_wait(
    name: str, timeout_s: float | None, max_wait_s: float | None, source: str
) -> WaitFor:
    """The wait of a call for signal ``name``, timing out after ``timeout_s`` (None: the
    longest wait in force, if any).

    Raises:
        ToolError: a bad name or timeout, or a timeout over ``max_wait_s``.
    """
    check_name(name)
    if timeout_s is None:
        timeout_s = max_wait_s
    elif isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise ToolError(f"timeout_s takes a number of seconds, not {type(timeout_s).__name__}")
    elif not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ToolError(f"timeout_s takes a positive, finite number of seconds, not {timeout_s}")
    elif max_wait_s is not None and timeout_s > max_wait_s:
        raise ToolError(
            f"a wait of {timeout_s:g} s is over the longest allowed, {max_wait_s:g} s "
            f"({source}); wait less, or raise {source}"
        )
    timeout_at_ms = None if timeout_s is None else now_ms() + math.ceil(timeout_s * 1000)
    return WaitFor(kind="signal", name=name, timeout_at_ms=timeout_at_ms)
