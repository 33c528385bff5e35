"""Time travel over a session's history: the points one can fork from, and the memory at one.

A *point* is a sequence number ``N``: the session as it was right after event ``N``, which is
the fold of events ``1..N``. A point is *replayable* when the history up to it is there to fold:
gapless from seq 1, or from an event that resets the whole memory (a compaction or a full
restore) after which nothing is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tether.core.context import CompactResult
from tether.core.events import (
    AgentEvent,
    CompactPayload,
    ErrorPayload,
    EventType,
    ForkedPayload,
    ItemsAppendedPayload,
    ItemsRemovedPayload,
    RestoredPayload,
    TextPayload,
    ToolResultPayload,
    UserInputPayload,
)
from tether.core.fold import apply_event
from tether.core.memory import InMemoryMemory, MemorySnapshot
from tether.errors import InvalidInput

PointKind = Literal["input", "run_end", "write", "fork"]


@dataclass(frozen=True)
class HistoryPoint:
    """A point a session can be forked from (``fork(..., at_seq=seq)``).

    Attributes:
        seq: the event the point follows: forking there keeps events ``1..seq``.
        ts_ms: when that event happened (milliseconds since the epoch).
        run_id: the run it belongs to (None for writes outside runs).
        kind: ``input`` (right after a user input), ``run_end`` (right after a run's last
            event), ``write`` (a memory write outside a run) or ``fork`` (where a fork began).
        text: what happened, for people.
    """

    seq: int
    ts_ms: int
    run_id: str | None
    kind: PointKind
    text: str


def _resets_memory(event: AgentEvent) -> bool:
    payload = event.payload
    return isinstance(payload, CompactPayload) or (
        isinstance(payload, RestoredPayload) and payload.memory is not None
    )


def replayable_seqs(events: Sequence[AgentEvent]) -> set[int]:
    """The sequence numbers of ``events`` whose point can be folded from what is there."""
    good: set[int] = set()
    previous = 0
    intact = False
    for event in events:
        intact = (intact or previous == 0) and event.seq == previous + 1
        if _resets_memory(event):
            intact = True
        if intact:
            good.add(event.seq)
        previous = event.seq
    return good


def memory_at(
    events: Sequence[AgentEvent], at_seq: int, *, where: str = "the session"
) -> tuple[list[AgentEvent], MemorySnapshot, CompactResult | None]:
    """The events up to ``at_seq``, the memory they fold into, and the last compaction in them.

    Raises:
        InvalidInput: ``at_seq`` is past the end of the history or before its first
            replayable point.
    """
    last = events[-1].seq if events else 0
    if isinstance(at_seq, bool) or not isinstance(at_seq, int) or at_seq > last:
        raise InvalidInput(
            f"cannot fork {where} at seq {at_seq!r}: its history ends at seq {last}; pick a "
            "point that 'tether sessions history' lists"
        )
    good = replayable_seqs(events)
    if at_seq not in good:
        first = min(good, default=None)
        hint = f"the first replayable point is seq {first}" if first else "no point is"
        raise InvalidInput(
            f"cannot fork {where} at seq {at_seq}: the history before it is not all there "
            f"({hint}); pick a point that 'tether sessions history' lists"
        )
    kept = [e for e in events if e.seq <= at_seq]
    memory = InMemoryMemory()
    last_compact: CompactResult | None = None
    for event in kept:
        apply_event(memory, event)
        # as AgentSession.replay does: the newest compaction in the kept log
        if isinstance(event.payload, CompactPayload):
            last_compact = event.payload.result
    return kept, memory.snapshot(), last_compact


def _describe_run_end(run: Sequence[AgentEvent]) -> str:
    for event in reversed(run):
        payload = event.payload
        if event.type is EventType.FINAL_OUTPUT and isinstance(payload, TextPayload):
            return f"answered: {payload.text}"
        if isinstance(payload, ErrorPayload):
            rolled_back = run[-1].type is EventType.SESSION_RESTORED
            suffix = " (rolled back)" if rolled_back else ""
            return f"{payload.error_type}: {payload.message}{suffix}"
        if isinstance(payload, ToolResultPayload) and payload.status == "WAITING":
            return f"waiting on call {payload.item.call_id}"
    return "ended"


def _describe_write(event: AgentEvent) -> str | None:
    payload = event.payload
    if isinstance(payload, ForkedPayload):
        return (
            f"forked from {payload.source_tenant}/{payload.source_session_id} "
            f"at seq {payload.at_seq}"
        )
    if isinstance(payload, ItemsAppendedPayload):
        return f"{len(payload.items)} items appended"
    if isinstance(payload, ItemsRemovedPayload):
        return f"{payload.count} items removed"
    if _resets_memory(event):
        return "memory compacted" if isinstance(payload, CompactPayload) else "memory restored"
    if event.type is EventType.TOOL_OUTPUT_REPLACED:
        return "tool output replaced"
    return None


def history_points(events: Sequence[AgentEvent]) -> list[HistoryPoint]:
    """The points one can fork from, in sequence order: each user input, each run's end,
    each memory write outside a run, and a fork's origin (replayable points only)."""
    good = replayable_seqs(events)
    points: list[HistoryPoint] = []
    run: list[AgentEvent] = []

    def close_run() -> None:
        if run:
            end = run[-1]
            points.append(
                HistoryPoint(end.seq, end.ts_ms, end.run_id, "run_end", _describe_run_end(run))
            )
            run.clear()

    for event in events:
        if run and event.run_id != run[0].run_id:
            close_run()
        if event.run_id is not None:
            run.append(event)
            if isinstance(event.payload, UserInputPayload):
                text = event.payload.item.content
                points.append(HistoryPoint(event.seq, event.ts_ms, event.run_id, "input", text))
            continue
        described = _describe_write(event)
        if described is not None:
            kind: PointKind = "fork" if event.type is EventType.SESSION_FORKED else "write"
            points.append(HistoryPoint(event.seq, event.ts_ms, None, kind, described))
    close_run()
    return [p for p in points if p.seq in good]
