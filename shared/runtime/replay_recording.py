"""A recorded run, read back from its session's event log: what a replay plays back.

A run's events (those carrying its run id) hold everything the agent loop got from outside:
each step's model request and answer (``MODEL_REQUEST``, ``MODEL_RESPONSE``, the memory items
``MEMORY_ITEMS_APPENDED`` stored) and each tool call's result (``TOOL_CALL``, ``TOOL_RESULT``).
The session as it was before the run is the fold of the events before the run's first one (the
event contract, :mod:`tether.core.fold`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tether.core.context import CompactResult
from tether.core.events import (
    AgentEvent,
    ErrorPayload,
    EventType,
    ItemsAppendedPayload,
    ModelRequestPayload,
    ModelResponsePayload,
    ToolCallPayload,
    ToolResultPayload,
    UserInputPayload,
)
from tether.core.history import memory_at
from tether.core.items import ToolCall
from tether.core.memory import MemorySnapshot
from tether.errors import InvalidInput, RunNotFound
from tether.models.replay import RecordedAnswer


@dataclass(frozen=True)
class RecordedCall:
    """One recorded tool call of a step and the result the run recorded for it."""

    call: ToolCall
    result: ToolResultPayload | None


@dataclass(frozen=True)
class RecordedRun:
    """A run's events and the session's events before it.

    Attributes:
        run_id: the run.
        tenant: its session's tenant.
        session_id: its session.
        before: the session's events before the run's first event.
        events: the run's events, in order (a failed run's rollback left out: a replay stops
            at the failure).
    """

    run_id: str
    tenant: str
    session_id: str
    before: tuple[AgentEvent, ...]
    events: tuple[AgentEvent, ...]

    @property
    def first_seq(self) -> int:
        """The sequence number of the run's first event."""
        return self.events[0].seq

    @property
    def input(self) -> str | None:
        """The run's user input (None: the run went on from memory)."""
        first = self.events[0].payload
        return first.item.content if isinstance(first, UserInputPayload) else None

    @property
    def last_step(self) -> int:
        """The run's last step (steps count from 0)."""
        return max(e.step for e in self.events)

    def memory_before(self) -> tuple[MemorySnapshot, CompactResult | None]:
        """The session's memory (and last compaction) right before the run.

        Raises:
            InvalidInput: the events before the run are not all there to fold (purged).
        """
        at = self.first_seq - 1
        if at == 0:
            return MemorySnapshot(), None
        try:
            _, memory, last_compact = memory_at(self.before, at)
        except InvalidInput as exc:
            raise InvalidInput(
                f"run {self.run_id!r} cannot be replayed: the events of "
                f"{self.tenant}/{self.session_id} before it (up to seq {at}) are not all there "
                "to rebuild its session (purged); replay a run whose history is whole"
            ) from exc
        return memory, last_compact

    def answers(self) -> list[RecordedAnswer]:
        """Each step's model request, answer and the memory items it appended, in order."""
        answers: list[RecordedAnswer] = []
        request: ModelRequestPayload | None = None
        for event in self.events:
            payload = event.payload
            if isinstance(payload, ModelRequestPayload):
                request = payload
            elif isinstance(payload, ModelResponsePayload) and request is not None:
                answers.append(RecordedAnswer(event.step, request, payload))
                request = None
            elif isinstance(payload, ErrorPayload) and request is not None:  # the model failed
                answers.append(RecordedAnswer(event.step, request, None, error=payload))
                request = None
            elif isinstance(payload, ItemsAppendedPayload) and answers:
                last = answers[-1]
                if last.step == event.step and last.response and last.memory_items is None:
                    answers[-1] = RecordedAnswer(
                        last.step, last.request, last.response, payload.items
                    )
        return answers

    def calls(self) -> dict[int, list[RecordedCall]]:
        """Each step's tool calls in call order, with their recorded results."""
        calls: dict[int, list[ToolCall]] = {}
        results: dict[tuple[int, str], ToolResultPayload] = {}
        for event in self.events:
            payload = event.payload
            if isinstance(payload, ToolCallPayload):
                calls.setdefault(event.step, []).append(payload.call)
            elif isinstance(payload, ToolResultPayload):
                results.setdefault((event.step, payload.item.call_id), payload)
        return {
            step: [RecordedCall(c, results.get((step, c.id))) for c in step_calls]
            for step, step_calls in calls.items()
        }


def recorded_run(history: Sequence[AgentEvent], run_id: str, *, where: str) -> RecordedRun:
    """The run ``run_id`` as ``history`` (a session's whole log, in order) recorded it.

    Raises:
        RunNotFound: no event of the run is in ``history`` (unknown, or its events purged).
        InvalidInput: the run does not start at step 0 (a rerun that went on from a fork's step;
            replay the run it came from).
    """
    mine = [e for e in history if e.run_id == run_id]
    if not mine:
        raise RunNotFound(
            f"run {run_id!r} has no events in {where}: it never ran there, has not committed "
            "yet, or its events were purged; list the session's runs with 'tether sessions "
            "history'"
        )
    if mine[0].step != 0:
        raise InvalidInput(
            f"run {run_id!r} starts at step {mine[0].step} (a rerun going on from a fork); "
            "replay the run it came from"
        )
    if mine[-1].type is EventType.SESSION_RESTORED:  # the rollback after a failure
        mine = mine[:-1]
    first = mine[0].seq
    before = tuple(e for e in history if e.seq < first)
    return RecordedRun(run_id, mine[0].tenant, mine[0].session_id or "", before, tuple(mine))
