"""A session's history as a timeline: per run, its model and tool calls with durations, tokens
and errors (pure: events in, rows out)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tether.core.events import (
    AgentEvent,
    ErrorPayload,
    EventType,
    ModelRequestPayload,
    ModelResponsePayload,
    ToolCallPayload,
    ToolResultPayload,
)
from tether.core.snapshot import RunRecord
from tether.producer.ops.render import event_summary

#: Events shown per run; a longer run shows its last ones.
MAX_EVENTS_PER_RUN = 400
SUMMARY_CHARS = 160


@dataclass
class CallRow:
    """One model call or tool call."""

    kind: str
    name: str
    step: int
    started_ms: int
    duration_ms: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    status: str = "running"
    detail: str = ""


@dataclass(frozen=True)
class EventRow:
    """One event, for display."""

    seq: int
    type: str
    step: int
    ts_ms: int
    summary: str


@dataclass
class RunTimeline:
    """One run of the session, as its events tell it."""

    run_id: str
    status: str | None = None
    first_ms: int = 0
    last_ms: int = 0
    steps: int = 0
    calls: list[CallRow] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)
    hidden_events: int = 0

    @property
    def duration_ms(self) -> int:
        """From its first event to its last."""
        return max(0, self.last_ms - self.first_ms)

    @property
    def tokens(self) -> int:
        """Tokens of its model calls."""
        return sum((c.input_tokens or 0) + (c.output_tokens or 0) for c in self.calls)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


class _Builder:
    """Folds events into run timelines."""

    def __init__(self) -> None:
        self.runs: dict[str, RunTimeline] = {}
        self._open_model: dict[tuple[str, int], CallRow] = {}
        self._open_tools: dict[tuple[str, str], CallRow] = {}

    def add(self, event: AgentEvent) -> None:
        key = event.run_id or "(session)"
        run = self.runs.get(key)
        if run is None:
            run = self.runs[key] = RunTimeline(key, first_ms=event.ts_ms)
        run.last_ms = max(run.last_ms, event.ts_ms)
        run.steps = max(run.steps, event.step + 1)
        summary = _short(event_summary(event))
        run.events.append(EventRow(event.seq, event.type.value, event.step, event.ts_ms, summary))
        self._call(run, event)

    def _call(self, run: RunTimeline, event: AgentEvent) -> None:
        payload = event.payload
        if isinstance(payload, ModelRequestPayload):
            row = CallRow("model", payload.model, event.step, event.ts_ms)
            run.calls.append(row)
            self._open_model[(run.run_id, event.step)] = row
        elif isinstance(payload, ModelResponsePayload):
            found = self._open_model.pop((run.run_id, event.step), None)
            if found is not None:
                found.duration_ms = event.ts_ms - found.started_ms
                found.input_tokens = payload.usage.input_tokens
                found.output_tokens = payload.usage.output_tokens
                found.status = "ok"
                found.detail = _short(payload.text or ", ".join(c.name for c in payload.tool_calls))
        elif isinstance(payload, ToolCallPayload):
            row = CallRow("tool", payload.call.name, event.step, event.ts_ms)
            row.detail = _short(payload.call.arguments)
            run.calls.append(row)
            self._open_tools[(run.run_id, payload.call.id)] = row
        elif isinstance(payload, ToolResultPayload):
            tool = self._open_tools.pop((run.run_id, payload.item.call_id), None)
            if tool is not None:
                tool.duration_ms = event.ts_ms - tool.started_ms
                tool.status = payload.status.lower()
                tool.detail = _short(payload.error or payload.item.output)
        elif isinstance(payload, ErrorPayload):
            run.errors.append(_short(f"{payload.error_type}: {payload.message}"))


def build_timeline(
    events: Iterable[AgentEvent], applied: Sequence[RunRecord] = ()
) -> list[RunTimeline]:
    """The runs of ``events`` in order of their first event, newest last; statuses from the
    head's ``applied`` records where it has them."""
    builder = _Builder()
    for event in events:
        if event.type is not EventType.STEP_START:  # STEP_END/START pairs add nothing to read
            builder.add(event)
    statuses = {record.run_id: record.status for record in applied}
    runs = list(builder.runs.values())
    for run in runs:
        run.status = statuses.get(run.run_id)
        if len(run.events) > MAX_EVENTS_PER_RUN:
            run.hidden_events = len(run.events) - MAX_EVENTS_PER_RUN
            run.events = run.events[-MAX_EVENTS_PER_RUN:]
    return runs
