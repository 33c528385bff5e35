"""Deterministic replay: run an agent again on a recorded run, offline, and compare.

:func:`replay_run` rebuilds the session as it was before the run (the fold of the events before
the run's first one), then runs the agent loop on the run's input with the recorded model
answers and tool results played back (:class:`~tether.models.replay.ReplayModel`,
:class:`~tether.runtime.replay_tools.PlaybackTool`): no model is called, no tool runs, nothing is
stored. The events the replay writes are compared with the recorded ones, one by one (type, step
and payload; timestamps, sequence numbers, and with ``model="agent"`` the model's call ids, left
out): the report says ``identical`` or names the first divergence, with its step and what was
expected and what happened.

``model="agent"`` asks the agent's own model instead of playing the recorded answers back: for
deterministic agents (a scripted model, a rule-based planner) whose decisions are code, so a
changed decision (another tool, another argument) shows up as a divergence at its tool call.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal

from tether.core.events import (
    AgentEvent,
    ErrorPayload,
    EventType,
    ModelRequestPayload,
    ModelResponsePayload,
    TextPayload,
    ToolCallPayload,
    ToolResultPayload,
    now_ms,
)
from tether.core.snapshot import SessionMetadata, SessionSnapshot
from tether.errors import TetherError
from tether.models.base import ModelClient
from tether.models.replay import ReplayModel, describe_request
from tether.runtime.agent import Agent
from tether.runtime.replay_recording import RecordedRun, recorded_run
from tether.runtime.replay_tools import NotingModel, PlaybackTool, describe_call

ModelMode = Literal["recorded", "agent"]
__all__ = ["Divergence", "ModelMode", "ReplayReport", "recorded_run", "replay_run"]


@dataclass(frozen=True)
class Divergence:
    """Where a replay first differed from its recording.

    Attributes:
        step: the step (as recorded; steps count from 0).
        index: the position among the run's events (from 0).
        expected: the recorded event, described on one line.
        actual: what the replay did there instead.
    """

    step: int
    index: int
    expected: str
    actual: str


@dataclass(frozen=True)
class ReplayReport:
    """The outcome of :func:`replay_run`."""

    run_id: str
    tenant: str
    session_id: str
    agent: str
    model: ModelMode
    recorded_events: int
    replayed_events: int
    steps: int
    divergence: Divergence | None = None

    @property
    def identical(self) -> bool:
        """Whether the replay wrote the recorded events."""
        return self.divergence is None

    def summary(self) -> str:
        """One line for people: ``identical`` or the divergence."""
        head = f"run {self.run_id} of {self.tenant}/{self.session_id} with agent {self.agent!r}"
        d = self.divergence
        if d is None:
            return f"{head}: identical ({self.steps} steps, {self.recorded_events} events)"
        return f"{head}: diverged at step {d.step}: expected {d.expected}; got {d.actual}"


def replay_run(
    agent: Agent, recorded: RecordedRun, *, model: ModelMode = "recorded"
) -> ReplayReport:
    """Replay ``recorded`` with ``agent`` (nothing is called, run or stored) and compare.

    Raises:
        InvalidInput: the events before the run are not all there to rebuild its session.
    """
    memory, last_compact = recorded.memory_before()
    source: ModelClient = agent.model if model == "agent" else ReplayModel(recorded.answers())
    noted = NotingModel(source)
    calls = recorded.calls()
    twin = Agent(
        noted,
        agent.model_name,
        tools=[PlaybackTool(t, calls, noted) for t in agent.tools.as_mapping().values()],
        system_prompt=agent.system_prompt,
        memory_factory=agent.memory_factory,
        # no wall-clock limits: a replay must not depend on how fast the machine is
        options=dataclasses.replace(agent.options, timeout_s=0, tool_timeout_s=None),
        name=agent.name,
    )
    twin.redact = agent.redact
    started = now_ms()
    metadata = SessionMetadata(
        session_id=recorded.session_id,
        tenant=recorded.tenant,
        created_at_ms=started,
        updated_at_ms=started,
    )
    snapshot = SessionSnapshot(
        metadata=metadata, memory=memory, last_seq=recorded.first_seq - 1, last_compact=last_compact
    )
    session = twin.session_from_snapshot(snapshot, copy=False, announce=False)
    stopped: str | None = None
    try:
        session.run(recorded.input, run_id=recorded.run_id)
    except TetherError as exc:  # the loop recorded it as an ERROR event: compared below
        stopped = f"{exc.error_type}: {exc}"
    replayed = [e for e in session.events if e.seq >= recorded.first_seq]
    return ReplayReport(
        run_id=recorded.run_id,
        tenant=recorded.tenant,
        session_id=recorded.session_id,
        agent=agent.name,
        model=model,
        recorded_events=len(recorded.events),
        replayed_events=len(replayed),
        steps=recorded.last_step + 1,
        divergence=_first_divergence(list(recorded.events), replayed, model, stopped),
    )


def _first_divergence(
    expected: list[AgentEvent], actual: list[AgentEvent], model: ModelMode, stopped: str | None
) -> Divergence | None:
    ignore_ids = model == "agent"
    for index, want in enumerate(expected):
        got = actual[index] if index < len(actual) else None
        if got is None:
            ended = f"the replay ended ({stopped})" if stopped else "the replay ended"
            return Divergence(want.step, index, describe(want), ended)
        if _shape(want, ignore_ids) != _shape(got, ignore_ids):
            return Divergence(want.step, index, describe(want), describe(got))
    if len(actual) > len(expected):
        extra = actual[len(expected)]
        return Divergence(extra.step, len(expected), "the end of the run", describe(extra))
    return None


def _shape(event: AgentEvent, ignore_ids: bool) -> tuple[str, int, Any]:
    payload = event.payload.model_dump(mode="json")
    return event.type.value, event.step, _without_ids(payload) if ignore_ids else payload


def _without_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k not in ("id", "call_id")}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


def describe(event: AgentEvent) -> str:
    """An event on one line, for divergence reports."""
    p = event.payload
    if isinstance(p, ToolCallPayload):
        return f"call {describe_call(p.call)}"
    if isinstance(p, ToolResultPayload):
        return f"result of {p.item.name}: {p.item.output!r} ({p.status})"
    if isinstance(p, ModelRequestPayload):
        return describe_request(p)
    if isinstance(p, ModelResponsePayload):
        calls = ", ".join(describe_call(c) for c in p.tool_calls)
        said = f" {p.text!r}" if p.text else ""
        return f"model answer{said}" + (f" calling {calls}" if calls else "")
    if isinstance(p, ErrorPayload):
        return f"error {p.error_type}: {p.message}"
    if isinstance(p, TextPayload) and event.type is EventType.FINAL_OUTPUT:
        return f"final output {p.text!r}"
    return f"{event.type.value} {json.dumps(p.model_dump(mode='json'), sort_keys=True)[:200]}"
