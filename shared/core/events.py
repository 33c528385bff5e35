"""Agent events: the append-only log of everything a session does.

Every event carries the session id, tenant, a per-session sequence number (from 1, continuing
after restore), the run id, the step, a millisecond timestamp, and a payload tagged by ``kind`` so
that a log read back from JSON folds exactly like the live one.

Schema versions (field ``v``):
- 1: initial format.
- 2: additive: the event types ``SESSION_FORKED`` and ``MEMORY_ITEMS_REMOVED``, and memory items
  of type ``external`` (:class:`tether.core.items.ExternalItem`). Only an event that uses one of
  them is written as v2, so every other event keeps its v1 bytes and older builds keep reading
  it; an older build reading a v2 event fails with ``UnsupportedSchemaVersion`` ("upgrade
  Tether") instead of misreading it.
- 3: additive: :class:`Usage` counts ``cached_tokens`` and ``reasoning_tokens``. A usage
  without them (both 0) is written without them, so only an event whose usage has one is v3.
- 4: additive: the event type ``MODEL_USAGE`` (:class:`ModelUsagePayload`), the tokens of a
  billed model call that no ``MODEL_RESPONSE`` holds: a compaction's summary call, or an answer
  the client could not use. Only those events are v4; an older build refuses them ("upgrade
  Tether") rather than read a log whose usage it would undercount.
- 5: additive: a :class:`~tether.core.items.ToolOutput` may carry ``wait_for`` (a call parked on
  a timer, a signal or children, :mod:`tether.core.waits`). Only an event holding such an item
  is v5; an older build refuses it rather than lose the wait.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tether.core.context import CompactResult, ContextReport
from tether.core.items import ExternalItem, Item, ToolCall, ToolOutput, UserMessage
from tether.core.memory import MemorySnapshot

EVENT_SCHEMA_VERSION = 5
"""The newest version this build writes (only for events that need it; see the module doc)."""
SUPPORTED_EVENT_VERSIONS = (1, 2, 3, 4, 5)


class EventType(StrEnum):
    """What happened. ``USER_INPUT`` to ``SESSION_RESTORED``, ``TOOL_RESULT`` and
    ``MEMORY_ITEMS_REMOVED`` change memory (see :mod:`tether.core.fold`); ``SESSION_FORKED``
    names where a forked session came from and changes nothing; ``MODEL_USAGE`` records the
    tokens of a model call without a ``MODEL_RESPONSE`` and changes nothing."""

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
    MEMORY_ITEMS_REMOVED = "MEMORY_ITEMS_REMOVED"
    SESSION_FORKED = "SESSION_FORKED"
    MODEL_USAGE = "MODEL_USAGE"


#: Event types added in event schema v2.
V2_EVENT_TYPES = frozenset({EventType.MEMORY_ITEMS_REMOVED, EventType.SESSION_FORKED})
#: Event types added in event schema v4.
V4_EVENT_TYPES = frozenset({EventType.MODEL_USAGE})


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EmptyPayload(_Payload):
    """No payload."""

    kind: Literal["none"] = "none"


class TextPayload(_Payload):
    """A text: the runtime name on STEP_*, the answer on FINAL_OUTPUT."""

    kind: Literal["text"] = "text"
    text: str


def _zero(value: int) -> bool:
    return value == 0


class Usage(_Payload):
    """Token usage of one model call or summed over a run.

    ``cached_tokens`` (input tokens the provider read from its prompt cache) is part of
    ``input_tokens``, and ``reasoning_tokens`` part of ``output_tokens``. Both are left out of
    the JSON when 0, so a usage without them keeps the bytes older builds read (schema v3).
    """

    kind: Literal["usage"] = "usage"
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = Field(default=0, exclude_if=_zero)
    reasoning_tokens: int = Field(default=0, exclude_if=_zero)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )

    @property
    def has_details(self) -> bool:
        """Whether it counts cached or reasoning tokens (what schema v3 added)."""
        return bool(self.cached_tokens or self.reasoning_tokens)


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


class ModelUsagePayload(_Payload):
    """The tokens of one billed model call that no ``MODEL_RESPONSE`` records (event
    ``MODEL_USAGE``, schema v4): they count like a response's, for ``model``.

    Attributes:
        model: the model the call went to (a compaction's summary model may not be the agent's).
        usage: what the provider reported for the call.
        call: why there is no ``MODEL_RESPONSE``: ``compaction`` (the summary call of an
            :class:`~tether.runtime.compaction.LlmCompactPolicy`, whose result is the
            ``MEMORY_COMPRESS`` event) or ``unusable_answer`` (the provider answered and billed,
            but the client could not read the answer: the call failed with ``ModelError``).
    """

    kind: Literal["model_usage"] = "model_usage"
    model: str
    usage: Usage
    call: Literal["compaction", "unusable_answer"]


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


class ItemsRemovedPayload(_Payload):
    """The last ``count`` memory items removed (``pop_item``, clearing a session)."""

    kind: Literal["items_removed"] = "items_removed"
    count: int = Field(ge=1)


class ForkedPayload(_Payload):
    """Where a forked session came from: the source and the sequence number it was forked at
    (the events up to it are the fork's history). The fold ignores it."""

    kind: Literal["forked"] = "forked"
    source_tenant: str
    source_session_id: str
    at_seq: int = Field(ge=0)
    source_last_seq: int = Field(ge=0)


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
    | ModelUsagePayload
    | ToolCallPayload
    | ToolResultPayload
    | UserInputPayload
    | ItemsAppendedPayload
    | ToolOutputReplacedPayload
    | CompactPayload
    | ProjectionPayload
    | RestoredPayload
    | ItemsRemovedPayload
    | ForkedPayload
    | ErrorPayload,
    Field(discriminator="kind"),
]
_PAYLOAD_TYPES = frozenset(get_args(get_args(Payload)[0]))
_APPENDED_FIELDS_SET = frozenset(
    {"type", "tenant", "session_id", "seq", "run_id", "step", "ts_ms", "payload"}
)


def now_ms() -> int:
    """Wall-clock time in milliseconds (event timestamps and metadata)."""
    return time.time_ns() // 1_000_000


class AgentEvent(BaseModel):
    """One entry of a session's event log."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1, 2, 3, 4, 5] = 1
    type: EventType
    tenant: str = "default"
    session_id: str | None = None
    seq: int = 0
    run_id: str | None = None
    step: int = 0
    ts_ms: int = Field(default_factory=now_ms)
    payload: Payload = EmptyPayload()

    @model_validator(mode="after")
    def _schema_version(self) -> AgentEvent:
        # the version follows the content, so v1 events stay byte-identical for older readers
        needed = _needed_version(self)
        if self.v < needed:
            if "v" in self.model_fields_set:
                raise ValueError(
                    f"a {self.type} event with this payload needs event schema v{needed}, "
                    f"not v{self.v}; omit 'v' to let the event choose it"
                )
            object.__setattr__(self, "v", needed)  # frozen model: set once, while validating
        return self

    def with_seq(self, seq: int) -> AgentEvent:
        """A copy with another sequence number."""
        return self.model_copy(update={"seq": seq})

    @classmethod
    def appended(
        cls,
        type_: EventType,
        payload: BaseModel,
        *,
        tenant: str,
        session_id: str,
        seq: int,
        run_id: str | None,
        step: int,
    ) -> AgentEvent:
        """The event a session appends: the same value as ``AgentEvent(...)`` from the same
        fields, built without validating them again. Only for values already of the right types
        (a session's own ids, a validated payload model): validating them again cost more than
        the rest of an Agents SDK ``add_items`` did (about 10 µs of it)."""
        if type(payload) not in _PAYLOAD_TYPES or not isinstance(type_, EventType):
            raise TypeError(f"not an event's type and payload: {type_!r}, {type(payload)!r}")
        if (run_id is not None and type(run_id) is not str) or type(step) is not int:
            # a caller's own value: validate it, so it is refused or converted as ever
            return cls(
                type=type_,
                tenant=tenant,
                session_id=session_id,
                seq=seq,
                run_id=run_id,
                step=step,
                payload=payload,
            )
        # what model_construct does, without its walk over every field's aliases and defaults
        # (which cost more than validating): all fields given, none extra, no private ones
        event = cls.__new__(cls)
        fields = {
            "v": 1,
            "type": type_,
            "tenant": tenant,
            "session_id": session_id,
            "seq": seq,
            "run_id": run_id,
            "step": step,
            "ts_ms": now_ms(),
            "payload": payload,
        }
        object.__setattr__(event, "__dict__", fields)
        object.__setattr__(event, "__pydantic_fields_set__", set(_APPENDED_FIELDS_SET))
        object.__setattr__(event, "__pydantic_extra__", None)
        object.__setattr__(event, "__pydantic_private__", None)
        fields["v"] = _needed_version(event)  # as the validator sets it
        return event


def _needed_version(event: AgentEvent) -> int:
    payload = event.payload
    if _waits(event):
        return 5
    if event.type in V4_EVENT_TYPES or isinstance(payload, ModelUsagePayload):
        return 4
    usage = payload.usage if isinstance(payload, ModelResponsePayload) else payload
    if isinstance(usage, Usage) and usage.has_details:
        return 3
    return 2 if _uses_v2(event) else 1


def _uses_v2(event: AgentEvent) -> bool:
    if event.type in V2_EVENT_TYPES:
        return True
    return any(isinstance(item, ExternalItem) for item in _items(event.payload))


def _items(payload: object) -> tuple[Item, ...]:
    """The memory items an event's payload carries."""
    if isinstance(payload, ItemsAppendedPayload):
        return payload.items
    if isinstance(payload, CompactPayload):
        return payload.result.memory.items
    if isinstance(payload, RestoredPayload) and payload.memory is not None:
        return payload.memory.items
    return ()


def _waits(event: AgentEvent) -> bool:
    """Whether the event holds a parked call's wait (schema v5)."""
    payload = event.payload
    if isinstance(payload, ToolResultPayload):
        return payload.item.wait_for is not None
    return any(isinstance(i, ToolOutput) and i.wait_for is not None for i in _items(payload))


def event_to_dict(event: AgentEvent) -> dict[str, Any]:
    """The JSON-ready dict of an event."""
    return event.model_dump(mode="json")
