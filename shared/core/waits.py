"""What a parked tool call waits for, settled by the fleet rather than by a person.

A tool parks its call with ``Waiting(wait_for=WaitFor(...))`` (``ctx.sleep`` builds a timer).
The :class:`WaitFor` rides on the call's :class:`~tether.core.items.ToolOutput` in memory, so the
session's own head says which calls wait and for what (the fold reproduces it from the
``TOOL_RESULT`` event; a ``TOOL_OUTPUT_REPLACED`` settles the call and clears it). Redis only
indexes it (:mod:`tether.runs.waits`): a lost index is rebuilt from the heads.

Format versions (field ``v``):
- 1: ``kind`` ``timer`` (``due_at_ms``), ``signal`` (``name``, ``timeout_at_ms``) or
  ``children`` (``children``, ``mode``, ``timeout_at_ms``).
"""

from __future__ import annotations

from collections.abc import Container
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

WAIT_FOR_VERSION = 1
#: Unix ms bounds a due time must lie in (JSON's safe integers).
_MAX_MS = 2**53


class ChildRef(BaseModel):
    """A child run (``ctx.spawn``): where it lives, its agent, and whether it outlives a
    cancelled parent (``detached``). A tool passes these to ``ctx.wait``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant: str
    session_id: str
    run_id: str
    agent: str = ""
    detached: bool = False


class WaitFor(BaseModel):
    """One call's wait: a timer, a signal, or child runs.

    ``wake_at_ms`` is when the fleet acts on its own: a timer's due time, or a signal's or
    children's timeout (None: only the event wakes it).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    kind: Literal["timer", "signal", "children"]
    due_at_ms: int | None = Field(default=None, ge=0, le=_MAX_MS)
    name: str | None = Field(default=None, min_length=1, max_length=200)
    timeout_at_ms: int | None = Field(default=None, ge=0, le=_MAX_MS)
    children: tuple[ChildRef, ...] = ()
    mode: Literal["all", "any"] = "all"

    @model_validator(mode="after")
    def _fields_of_kind(self) -> WaitFor:
        if self.kind == "timer" and self.due_at_ms is None:
            raise ValueError("a timer wait needs due_at_ms")
        if self.kind == "signal" and self.name is None:
            raise ValueError("a signal wait needs the signal's name")
        if self.kind == "children" and not self.children:
            raise ValueError("a children wait needs at least one child")
        return self

    @property
    def wake_at_ms(self) -> int | None:
        """When the fleet wakes the call by itself (None: never; only its event does)."""
        return self.due_at_ms if self.kind == "timer" else self.timeout_at_ms

    def reason(self, ended: Container[str] = ()) -> str:
        """What the run waits for, in a few words (``tether status``, the console);
        ``ended``: the run ids of the children that ended so far (the parent's family record),
        for ``children 2/3 (all)``."""
        if self.kind == "timer":
            return f"timer due {iso_ms(self.due_at_ms or 0)}"
        if self.kind == "signal":
            return f"signal {self.name}"
        done = sum(1 for c in self.children if c.run_id in ended)
        return f"children {done}/{len(self.children)} ({self.mode})"


def iso_ms(ms: int) -> str:
    """``ms`` (Unix) as an ISO-8601 UTC time to the second, ``2026-12-07T18:00:00Z``."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
