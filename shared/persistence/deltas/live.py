"""One order for a session's committed events and its live pieces (sans-IO, shared by the
sync and asyncio followers).

The worker guarantees, per step: the ``MODEL_REQUEST`` event is in the event stream before the
step's first piece is published, and every piece is published before the step's
``MODEL_RESPONSE`` event is appended. A follower reads both streams in one ``XREAD`` (the same
slot, one atomic reply), and :class:`LiveOrder` places each step's pieces right after its
``MODEL_REQUEST`` when that event is in the same batch, else before the batch's events (the
request was already handed out). Two steps' pieces never interleave, because one step's are all
published before the next step's request.

Redo (a crash mid-stream): the next attempt has a higher fence. Its pieces start at index 0;
pieces of an older attempt of that run that arrive afterwards (a paused worker's) are dropped,
and so are pieces of a step whose ``MODEL_RESPONSE`` the reader already got. Readers that show
text reset a step when its fence changes (:class:`LiveText`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from tether.core.events import AgentEvent, EventType
from tether.persistence.deltas.base import LiveDelta

LiveItem: TypeAlias = AgentEvent | LiveDelta
"""What a live follower yields: a committed event or a piece of the current step."""
#: An event with the fence of the stream entry that carried it.
Fenced: TypeAlias = tuple[int, AgentEvent]
_StepKey: TypeAlias = tuple[str, int, int]  # run id, fence, step


def _request_key(fenced: Fenced) -> _StepKey | None:
    fence, event = fenced
    if event.type is EventType.MODEL_REQUEST and event.run_id is not None:
        return event.run_id, fence, event.step
    return None


@dataclass
class _RunState:
    fence: int = 0
    closed_step: int = -1  # the newest step of ``fence`` whose MODEL_RESPONSE was handed out


@dataclass
class LiveOrder:
    """Puts batches of both streams in one order, dropping superseded pieces."""

    runs: dict[str, _RunState] = field(default_factory=dict)
    #: Pieces of the catch-up whose step's ``MODEL_REQUEST`` was not in the stream yet.
    pending: list[LiveDelta] = field(default_factory=list)

    def start(
        self, events: Sequence[Fenced], top: Fenced | None, current: Sequence[LiveDelta]
    ) -> list[LiveItem]:
        """The catch-up: the visible events, and the pieces of the step under way (read before
        the events) when the stream's newest event is still that step's ``MODEL_REQUEST``.
        When the request is not in the stream yet (the worker publishes events and pieces on
        two connections, so on a loaded machine its pieces can land first), the pieces wait
        for it and come right after it."""
        under_way = (
            bool(current)
            and top is not None
            and _request_key(top) == (current[0].run_id, current[0].fence, current[0].step)
        )
        if under_way:
            return self.batch(events, current)
        out = self.batch(events, ())
        self.pending = [d for d in current if self._live(d)]
        return out

    def start_whole(
        self, events: Sequence[Fenced], top: Fenced | None, pieces: Sequence[LiveDelta]
    ) -> list[LiveItem]:
        """The catch-up of a reader of whole runs: the visible events, read first, and then
        every piece the channel still holds, oldest first. Each step's pieces come right after
        its ``MODEL_REQUEST`` when that event is among ``events`` (a finished step too: a reader
        that attaches after its run ended still gets every piece); the pieces of the step
        whose request is the stream's newest event, handed out before, come first; the others
        wait for their request (published after the events were read)."""
        anchored = {k for k in map(_request_key, events) if k is not None}
        top_key = None if top is None else _request_key(top)
        handed = top_key if top_key not in anchored else None
        placed = [d for d in pieces if (d.run_id, d.fence, d.step) in anchored]
        first = [d for d in pieces if (d.run_id, d.fence, d.step) == handed]
        out = self.batch(events, first + placed)
        later = [
            d for d in pieces if (k := (d.run_id, d.fence, d.step)) not in anchored and k != handed
        ]
        self.pending = [d for d in later if self._live(d)]
        return out

    def batch(self, events: Sequence[Fenced], deltas: Iterable[LiveDelta]) -> list[LiveItem]:
        """One batch read together (both streams up to one moment), in order."""
        for fence, event in events:
            self._seen(event.run_id, fence)
        pieces = [d for d in deltas if self._live(d)]
        anchored = {k for k in map(_request_key, events) if k is not None}
        waiting = [d for d in self.pending if self._live(d)]
        self.pending = [d for d in waiting if (d.run_id, d.fence, d.step) not in anchored]
        pieces = [d for d in waiting if (d.run_id, d.fence, d.step) in anchored] + pieces
        out: list[LiveItem] = [d for d in pieces if (d.run_id, d.fence, d.step) not in anchored]
        for fenced in events:
            fence, event = fenced
            out.append(event)
            key = _request_key(fenced)
            if key is not None and key in anchored:
                anchored.discard(key)  # a step's pieces follow its (one) request
                out.extend(d for d in pieces if (d.run_id, d.fence, d.step) == key)
            if event.type is EventType.MODEL_RESPONSE and event.run_id is not None:
                state = self._seen(event.run_id, fence)
                if fence == state.fence:
                    state.closed_step = max(state.closed_step, event.step)
        return out

    def _seen(self, run_id: str | None, fence: int) -> _RunState:
        state = self.runs.setdefault(run_id or "", _RunState())
        if fence > state.fence:
            state.fence, state.closed_step = fence, -1
        return state

    def _live(self, delta: LiveDelta) -> bool:
        state = self._seen(delta.run_id, delta.fence)
        return delta.fence == state.fence and delta.step > state.closed_step


@dataclass
class StepText:
    """The text (and tool-call arguments) of one step as its pieces arrive."""

    run_id: str
    step: int
    fence: int
    text: str = ""
    arguments: dict[int, str] = field(default_factory=dict)
    tools: dict[int, str] = field(default_factory=dict)


@dataclass
class LiveText:
    """Folds a live feed into what a person should see: the current step's text as it grows.

    ``add`` answers what changed: ``"piece"`` (the step's text grew), ``"redo"`` (a newer
    attempt started the step again: the partial text shown so far is void, and ``current``
    holds only the new attempt's), ``"committed"`` (the step's ``MODEL_RESPONSE``: its text is
    final) or None.
    """

    current: StepText | None = None

    def add(self, item: LiveItem) -> str | None:
        """Take one item of a live feed; what it changed."""
        if isinstance(item, AgentEvent):
            if item.type is EventType.MODEL_RESPONSE and self.current is not None:
                same = (self.current.run_id, self.current.step) == (item.run_id, item.step)
                if same:
                    self.current = None
                    return "committed"
            return None
        redo = False
        cur = self.current
        if cur is None or (cur.run_id, cur.step, cur.fence) != (item.run_id, item.step, item.fence):
            redo = cur is not None and cur.run_id == item.run_id and item.fence > cur.fence
            cur = self.current = StepText(item.run_id, item.step, item.fence)
        if item.kind == "text":
            cur.text += item.text
        else:
            cur.arguments[item.call_index] = cur.arguments.get(item.call_index, "") + item.text
            if item.tool_name is not None:
                cur.tools[item.call_index] = item.tool_name
        return "redo" if redo else "piece"
