"""Agent events: the append-only log of everything a session does.

Every event carries the session id, tenant, a per-session sequence number (from 1, continuing
after restore), the run id, the step, a millisecond timestamp, and a payload tagged by ``kind`` so
that a log read back from JSON folds exactly like the live one.

Schema versions (field ``v``):
- 1: initial format.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tether.core.context import CompactResult, ContextReport
from tether.core.items import Item, ToolCall, ToolOutput, UserMessage
from tether.core.memory import MemorySnapshot

EVENT_SCHEMA_VERSION = 1
SUPPORTED_EVENT_VERSIONS = (1,)


class EventType(StrEnum):
    """What happened. The last six change memory (see :mod:`tether.core.fold`)."""

    STEP_START = "STEP_START"
    MODEL_REQUEST = "MODEL_REQUEST"
    MODEL_RESPONSE = "MODEL_RESPONSE"
    TOOL_CALL = "TOOL_CALL"
    TOOL_RESULT = "TOOL_RESULT"
    FINAL_OUTPUT = "FINAL_OUTPUT"
    STEP_END = "STEP_END"
    ERROR = "ERROR"
    USER_INPUT = "USER_INPUT"
    MEMORY_ITEMS_APPENDED = "MEMORY_ITEMS_APPENDED"
    TOOL_OUTPUT_REPLACED = "TOOL_OUTPUT_REPLACED"
    MEMORY_COMPRESS = "MEMORY_COMPRESS"
    SESSION_RESTORED = "SESSION_RESTORED"


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EmptyPayload(_Payload):
    """No payload."""

    kind: Literal["none"] = "none"


class TextPayload(_Payload):
    """A text: the runtime name on STEP_*, the answer on FINAL_OUTPUT."""

    kind: Literal["text"] = "text"
    text: str


class Usage(_Payload):
    """Token usage of one model call or summed over a run."""

    kind: Literal["usage"] = "usage"
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )


class ModelRequestPayload(_Payload):
    """A model request: the model, how many prompt items, which tools were visible."""

    kind: Literal["model_request"] = "model_request"
    model: str
    item_count: int
    tool_names: tuple[str, ...] = ()
    has_summary: bool = False


class ModelResponsePayload(_Payload):
    """What the model answered."""

    kind: Literal["model_response"] = "model_response"
    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()


class ToolCallPayload(_Payload):
    """One tool call, before execution."""

    kind: Literal["tool_call"] = "tool_call"
    call: ToolCall


class ToolResultPayload(_Payload):
    """A tool's result. ``item`` is exactly what memory received (the fold appends it)."""

    kind: Literal["tool_result"] = "tool_result"
    item: ToolOutput
    ok: bool = True
    status: Literal["COMPLETED", "FAILED", "WAITING"] = "COMPLETED"
    error: str | None = None


class UserInputPayload(_Payload):
    """The user message appended to memory."""

    kind: Literal["user_input"] = "user_input"
    item: UserMessage


class ItemsAppendedPayload(_Payload):
    """Items appended to memory (model output)."""

    kind: Literal["items_appended"] = "items_appended"
    items: tuple[Item, ...]


class ToolOutputReplacedPayload(_Payload):
    """A tool output patched after the fact (async tools)."""

    kind: Literal["tool_output_replaced"] = "tool_output_replaced"
    call_id: str
    output: str


class CompactPayload(_Payload):
    """A compaction; the fold resets memory to ``result.memory``."""

    kind: Literal["compact"] = "compact"
    result: CompactResult


class ProjectionPayload(_Payload):
    """A per-request context projection report; the fold ignores it."""

    kind: Literal["projection"] = "projection"
    report: ContextReport


class RestoredPayload(_Payload):
    """A restore. With ``memory`` the fold resets memory to it; without, the restore was *by
    reference* to the committed state at ``base_seq`` (whose memory digest is ``checksum``), which
    the fold already holds, so it changes nothing."""

    kind: Literal["restored"] = "restored"
    memory: MemorySnapshot | None = None
    base_seq: int = 0
    checksum: str | None = None


class ErrorPayload(_Payload):
    """A failure: which error class, its message, and whether the attempt may be retried."""

    kind: Literal["error"] = "error"
    error_type: str
    message: str
    retryable: bool = False


Payload = Annotated[
    EmptyPayload
    | TextPayload
    | Usage
    | ModelRequestPayload
    | ModelResponsePayload
    | ToolCallPayload
    | ToolResultPayload
    | UserInputPayload
    | ItemsAppendedPayload
    | ToolOutputReplacedPayload
    | CompactPayload
    | ProjectionPayload
    | RestoredPayload
    | ErrorPayload,
    Field(discriminator="kind"),
]


def now_ms() -> int:
    """Wall-clock time in milliseconds (event timestamps and metadata)."""
    return time.time_ns() // 1_000_000


class AgentEvent(BaseModel):
    """One entry of a session's event log."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    type: EventType
    tenant: str = "default"
    session_id: str | None = None
    seq: int = 0
    run_id: str | None = None
    step: int = 0
    ts_ms: int = Field(default_factory=now_ms)
    payload: Payload = EmptyPayload()

    def with_seq(self, seq: int) -> AgentEvent:
        """A copy with another sequence number."""
        return self.model_copy(update={"seq": seq})


def event_to_dict(event: AgentEvent) -> dict[str, Any]:
    """The JSON-ready dict of an event."""
    return event.model_dump(mode="json")
