"""Sample sessions and events for the storage tests: every item type and many payload kinds."""

from __future__ import annotations

from pydantic import JsonValue

from tether.core.context import CompactResult, ContextReport
from tether.core.events import (
    AgentEvent,
    ErrorPayload,
    EventType,
    ItemsAppendedPayload,
    ModelRequestPayload,
    ModelResponsePayload,
    TextPayload,
    ToolCallPayload,
    ToolResultPayload,
    Usage,
    UserInputPayload,
)
from tether.core.items import (
    AssistantMessage,
    Item,
    Reasoning,
    ToolCall,
    ToolCallsMessage,
    ToolOutput,
    UserMessage,
)
from tether.core.memory import MemorySnapshot
from tether.core.snapshot import RunRecord, SessionMetadata, SessionSnapshot

BASE_MS = 1_700_000_000_000


def all_item_types(text: str = "") -> tuple[Item, ...]:
    """One item of each of the five types (``text`` is appended to the user message)."""
    call = ToolCall(id="call-1", name="lookup", arguments='{"q": "weather in Zürich"}')
    return (
        UserMessage(content="What's the weather? ☀ " + text),
        Reasoning(text="The user wants the weather; call the tool."),
        ToolCallsMessage(content="", tool_calls=(call,)),
        ToolOutput(call_id="call-1", name="lookup", output='{"temp_c": 21}'),
        AssistantMessage(content="It is 21 °C."),
    )


def sample_events(
    session_id: str, tenant: str = "default", *, first_seq: int = 1, count: int = 6
) -> list[AgentEvent]:
    """``count`` events with contiguous seqs from ``first_seq``, cycling through payload kinds."""
    call = ToolCall(id="call-1", name="lookup", arguments="{}")
    payloads = [
        (EventType.USER_INPUT, UserInputPayload(item=UserMessage(content="hi"))),
        (EventType.MODEL_REQUEST, ModelRequestPayload(model="scripted", item_count=1)),
        (
            EventType.MODEL_RESPONSE,
            ModelResponsePayload(text=None, tool_calls=(call,), usage=Usage(input_tokens=3)),
        ),
        (EventType.TOOL_CALL, ToolCallPayload(call=call)),
        (
            EventType.TOOL_RESULT,
            ToolResultPayload(item=ToolOutput(call_id="call-1", output="ok"), ok=True),
        ),
        (
            EventType.MEMORY_ITEMS_APPENDED,
            ItemsAppendedPayload(items=(AssistantMessage(content="done"),)),
        ),
        (EventType.FINAL_OUTPUT, TextPayload(text="done")),
        (EventType.ERROR, ErrorPayload(error_type="ToolError", message="boom", retryable=False)),
    ]
    out: list[AgentEvent] = []
    for offset in range(count):
        seq = first_seq + offset
        event_type, payload = payloads[(seq - 1) % len(payloads)]
        out.append(
            AgentEvent(
                type=event_type,
                tenant=tenant,
                session_id=session_id,
                seq=seq,
                run_id="run-1",
                step=1 + offset // 4,
                ts_ms=BASE_MS + seq,
                payload=payload,
            )
        )
    return out


def sample_snapshot(
    session_id: str = "s-1",
    tenant: str = "default",
    *,
    big_text: str = "",
    attributes: dict[str, JsonValue] | None = None,
) -> SessionSnapshot:
    """A snapshot using every part of the format (items of every type, events, compaction...)."""
    items = all_item_types(big_text)
    memory = MemorySnapshot(items=items, summary="Earlier: the user said hello.")
    events = sample_events(session_id, tenant, first_seq=1, count=8)
    compact = CompactResult(
        memory=MemorySnapshot(items=items[:1], summary="compacted"),
        summary="compacted",
        context_report=ContextReport(source_item_count=5, projected_item_count=1),
        completed=("looked up the weather",),
        pending=("nothing",),
        decisions=("use celsius",),
    )
    applied = [
        RunRecord(
            request_id="req-1",
            run_id="run-1",
            status="SUCCEEDED",
            output="It is 21 °C.",
            steps=2,
            usage=Usage(input_tokens=10, output_tokens=5, total_tokens=15),
            first_seq=1,
            last_seq=8,
            finished_at_ms=BASE_MS + 9,
        )
    ]
    return SessionSnapshot(
        metadata=SessionMetadata(
            session_id=session_id,
            tenant=tenant,
            created_at_ms=BASE_MS,
            updated_at_ms=BASE_MS + 9,
            attributes=dict(attributes)
            if attributes is not None
            else {"user": "u-42", "tags": ["a", "b"], "limits": {"max_steps": 8}, "beta": True},
        ),
        memory=memory,
        events=events,
        last_seq=8,
        archived_seq=0,
        last_compact=compact,
        applied=applied,
    )
