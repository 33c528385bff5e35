"""Where a run stopped: derived from its recorded events, so another process can go on from there.

A run's events say everything the loop needs to resume it: which steps ended (``STEP_END``), the
tool calls of a step that was cut short (``TOOL_CALL``) and which of them already have a result
(``TOOL_RESULT``), the tokens used and the last model text. Resuming never asks the model for a
step it already answered and never runs a call that already has a result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tether.core.events import (
    AgentEvent,
    EventType,
    ModelResponsePayload,
    ToolCallPayload,
    ToolResultPayload,
    Usage,
)
from tether.core.items import ToolCall
from tether.core.results import ToolResultRecord


@dataclass(frozen=True)
class RunProgress:
    """How far a run got.

    Attributes:
        first_seq: the sequence number of the run's first event.
        next_step: the first step to run from scratch.
        open_step: a step cut short after its tool calls were recorded (it is finished first:
            its ``pending`` calls run, then it ends), or None.
        pending: calls of the open step that have no result yet, in call order.
        usage: tokens used so far.
        tool_calls: every call made so far, in order.
        tool_results: every result recorded so far, in order.
        last_text: the last model text.
    """

    first_seq: int
    next_step: int = 0
    open_step: int | None = None
    pending: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResultRecord, ...] = field(default=())
    last_text: str | None = None


def progress_of(run_id: str, events: Sequence[AgentEvent]) -> RunProgress | None:
    """The progress of ``run_id`` recorded in ``events``; None when it has no event there."""
    mine = [e for e in events if e.run_id == run_id]
    if not mine:
        return None
    usage = Usage()
    calls: list[ToolCall] = []
    results: list[ToolResultRecord] = []
    last_text: str | None = None
    ended = -1
    open_calls: dict[str, ToolCall] = {}
    for event in mine:
        payload = event.payload
        if event.type is EventType.STEP_START:
            open_calls = {}
        elif isinstance(payload, ModelResponsePayload):
            usage = usage + payload.usage
            last_text = payload.text
        elif isinstance(payload, ToolCallPayload):
            calls.append(payload.call)
            open_calls[payload.call.id] = payload.call
        elif isinstance(payload, ToolResultPayload):
            results.append(_record(payload))
            open_calls.pop(payload.item.call_id, None)
        elif event.type is EventType.STEP_END:
            ended = event.step
            open_calls = {}
    last_step = max(e.step for e in mine)
    # a replayed prefix ends at a checkpoint: a step still open there had its calls recorded
    cut_short = last_step > ended and any(
        e.type is EventType.TOOL_CALL and e.step == last_step for e in mine
    )
    return RunProgress(
        first_seq=mine[0].seq,
        next_step=last_step + 1 if cut_short else ended + 1,
        open_step=last_step if cut_short else None,
        pending=tuple(open_calls.values()) if cut_short else (),
        usage=usage,
        tool_calls=tuple(calls),
        tool_results=tuple(results),
        last_text=last_text,
    )


def _record(payload: ToolResultPayload) -> ToolResultRecord:
    return ToolResultRecord(
        call_id=payload.item.call_id,
        name=payload.item.name,
        output=payload.item.output,
        ok=payload.ok,
        status=payload.status,
        error=payload.error,
    )
