"""Tools that play recorded results back instead of running (used by :mod:`tether.runtime.replay`).

A :class:`PlaybackTool` stands in for one of the agent's tools: it has the tool's name, schema and
argument validation (so a changed schema shows up as a changed result), but its ``execute``
never calls the tool: it answers with the result the recording holds for the call at the same
place (the step, and the call's position among the step's calls). A call unlike the recorded one
gets a ``ReplayDiverged`` failure; the replay reports the divergence at its ``TOOL_CALL`` already.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from tether.core.items import ToolCall
from tether.models.base import ModelClient, ModelRequest, ModelResponse
from tether.runtime.replay_recording import RecordedCall
from tether.runtime.tools import Tool, ToolContext, ToolOutcome, failed


def describe_call(call: ToolCall) -> str:
    """A tool call on one line: ``name(arguments)``."""
    return f"{call.name}({call.arguments})"


def same_call(a: ToolCall, b: ToolCall) -> bool:
    """The same tool with the same arguments (call ids are the model's, and may be random)."""
    return a.name == b.name and a.arguments == b.arguments


class NotingModel:
    """Hands requests to ``inner`` and notes each answer's tool calls, step by step (the n-th
    request is step n), so a :class:`PlaybackTool` knows a call's position in its step."""

    def __init__(self, inner: ModelClient) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self.calls: list[tuple[ToolCall, ...]] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        """``inner``'s answer, noted."""
        response = self.inner.complete(request)
        with self._lock:
            self.calls.append(response.tool_calls)
        return response

    def position(self, step: int, call_id: str) -> int | None:
        """Where the call ``call_id`` (as the loop named it) is among the calls of ``step``."""
        with self._lock:
            calls = self.calls[step] if step < len(self.calls) else ()
        for index, call in enumerate(calls):
            if (call.id.strip() or f"tool_step_{step}_{index}") == call_id:
                return index
        return None


class PlaybackTool(Tool):
    """One of the agent's tools, answering from the recording (never run)."""

    def __init__(
        self, tool: Tool, recorded: Mapping[int, Sequence[RecordedCall]], noted: NotingModel
    ) -> None:
        # a copy of the tool's face, not of its behaviour: Tool.__init__ would derive it again
        self.__dict__.update(tool.__dict__)
        self.isolated = False  # nothing runs, so nothing needs a child process or a time limit
        self.timeout_s = None
        self._recorded = recorded
        self._noted = noted

    def execute(self, call: ToolCall, context: ToolContext | None = None) -> ToolOutcome:
        """The recorded result of the call at this place, after the tool's own validation."""
        parsed = self.parse(call)
        if isinstance(parsed, ToolOutcome):
            return parsed
        step = context.step if context is not None else 0
        index = self._noted.position(step, call.id)
        recorded = self._recorded.get(step, ())
        if index is None or index >= len(recorded):
            return failed(call, "ReplayDiverged", f"step {step} recorded no such call")
        expected = recorded[index]
        if not same_call(expected.call, call) or expected.result is None:
            return failed(
                call,
                "ReplayDiverged",
                f"step {step} recorded {describe_call(expected.call)} here, with no result"
                if expected.result is None
                else f"step {step} recorded {describe_call(expected.call)} here",
            )
        result = expected.result
        return ToolOutcome(
            call=call,
            output=result.item.output,
            ok=result.ok,
            status=result.status,
            error=result.error,
        )
