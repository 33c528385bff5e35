"""How child runs end, as their parent sees them: a child's end (:class:`ChildEnd`), whether a
parent's wait on its children is over (:func:`children_ready`), and the tool output the parent's
call gets when it is (:func:`children_output`).

A parent's tool spawns children (``ctx.spawn``) and parks on them (``ctx.wait``, a
:class:`~tether.core.waits.WaitFor` of kind ``children``). Each child's worker records the
child's end beside the parent's session (:mod:`tether.runs.waits.children`) and wakes the parent
once the wait is over; the parent's call then gets :func:`children_output` as its output: every
child's status and output, or its error (a failed child is a result the model reads, not a
failure of the parent).

Format versions of :class:`ChildEnd` (field ``v``): 1.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from tether.core.waits import WaitFor

#: A child's output in its parent's tool result is cut to this many characters.
MAX_CHILD_OUTPUT_CHARS = 20_000


class ChildEnd(BaseModel):
    """How one child run ended (its last run, when it went on after a wait of its own)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    run_id: str
    """The child as spawned (the run id of its :class:`~tether.core.waits.ChildRef`)."""
    status: str
    """``COMPLETED``, ``FAILED``, ``CANCELLED`` or ``CONTINUATION_REQUIRED``."""
    output: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    ended_at_ms: int = 0

    @property
    def ok(self) -> bool:
        """Whether the child gave an output (it neither failed nor was cancelled)."""
        return self.status not in ("FAILED", "CANCELLED")


def children_ready(wait_for: WaitFor, ends: Mapping[str, ChildEnd]) -> bool:
    """Whether a wait on children is over: every child ended (``all``), or one (``any``)."""
    done = sum(1 for c in wait_for.children if c.run_id in ends)
    return done >= 1 if wait_for.mode == "any" else done == len(wait_for.children)


def children_output(
    wait_for: WaitFor, ends: Mapping[str, ChildEnd], *, timed_out: bool = False
) -> str:
    """The output of a call that waited on children: per child its status and output, or its
    error (``IN_PROGRESS``: not ended yet, after ``any`` or a timeout)."""
    rows: list[dict[str, Any]] = []
    for child in wait_for.children:
        end = ends.get(child.run_id)
        row: dict[str, Any] = {
            "run_id": child.run_id,
            "session_id": child.session_id,
            "agent": child.agent,
            "status": end.status if end is not None else "IN_PROGRESS",
        }
        if end is not None and end.ok:
            row["output"] = (end.output or "")[:MAX_CHILD_OUTPUT_CHARS]
        elif end is not None:
            row["error"] = {"type": end.error_type, "message": end.error_message}
        rows.append(row)
    done = sum(1 for r in rows if r["status"] != "IN_PROGRESS")
    body = {
        "mode": wait_for.mode,
        "done": done,
        "total": len(rows),
        "timed_out": timed_out,
        "children": rows,
    }
    return json.dumps(body, ensure_ascii=False)
