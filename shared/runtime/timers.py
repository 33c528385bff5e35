"""Timers of calls parked on the fleet: the wait a sleep asks for, checked against the longest
wait in force, and the output the call gets when the fleet wakes it (see
:mod:`tether.runtime.waiting`).

The longest wait (``TETHER_MAX_WAIT_S``, or a tenant's ``max_wait_s``) is set around a run by
the worker (:func:`wait_limit`) and handed to each call's
:class:`~tether.runtime.tools.ToolContext`; a sleep beyond it fails the call with a message naming
the limit, and nothing is parked.
"""

from __future__ import annotations

import contextvars
import datetime
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tether.core.events import now_ms
from tether.core.waits import WaitFor, iso_ms
from tether.errors import ToolError

_limit: contextvars.ContextVar[tuple[float, str] | None] = contextvars.ContextVar(
    "tether_wait_limit", default=None
)


@contextmanager
def wait_limit(max_wait_s: float | None, source: str = "TETHER_MAX_WAIT_S") -> Iterator[None]:
    """Within this block, tools of runs started here may park for at most ``max_wait_s``
    (``source`` names the setting, for the refusal's message)."""
    token = _limit.set(None if max_wait_s is None else (max_wait_s, source))
    try:
        yield
    finally:
        _limit.reset(token)


def wait_limit_fields() -> dict[str, Any]:
    """The :class:`ToolContext` fields of the limit in force (none outside :func:`wait_limit`)."""
    current = _limit.get()
    if current is None:
        return {}
    return {"max_wait_s": current[0], "max_wait_source": current[1]}


def timer_for(seconds: float, max_wait_s: float | None, source: str) -> WaitFor:
    """The timer of a sleep of ``seconds`` from now.

    Raises:
        ToolError: ``seconds`` is not a positive finite number, or over ``max_wait_s``.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ToolError(f"sleep takes a number of seconds, not {type(seconds).__name__}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ToolError(f"sleep takes a positive, finite number of seconds, not {seconds}")
    if max_wait_s is not None and seconds > max_wait_s:
        raise ToolError(
            f"a wait of {seconds:g} s is over the longest allowed, {max_wait_s:g} s "
            f"({source}); wait less, or raise {source}"
        )
    return WaitFor(kind="timer", due_at_ms=now_ms() + math.ceil(seconds * 1000))


def seconds_until(when: datetime.datetime) -> float:
    """Seconds from now until ``when`` (1 ms when it is past).

    Raises:
        ToolError: ``when`` is not a timezone-aware datetime.
    """
    if not isinstance(when, datetime.datetime) or when.tzinfo is None:
        raise ToolError(
            "sleep_until takes a timezone-aware datetime (e.g. datetime.now(UTC) + "
            "timedelta(hours=2)), so the fleet's clocks agree on it"
        )
    return max(when.timestamp() - now_ms() / 1000, 0.001)


def timer_output(wait_for: WaitFor, woke_at_ms: int) -> str:
    """The output a timer's call gets when the fleet wakes it."""
    return json.dumps(
        {"slept_until": iso_ms(wait_for.due_at_ms or 0), "woke_at": iso_ms(woke_at_ms)},
        sort_keys=True,
    )


def timeout_output(wait_for: WaitFor, woke_at_ms: int) -> str:
    """The output a call waiting for a signal or children gets when its timeout passes first: a
    clear result the model reads, not an error of the run."""
    doc: dict[str, Any] = {
        "timed_out": True,
        "waited_for": wait_for.kind,
        "woke_at": iso_ms(woke_at_ms),
    }
    if wait_for.name is not None:
        doc["signal"] = wait_for.name
    return json.dumps(doc, sort_keys=True)
