"""The transcript of each line of a results file: the events of the case's runs, read from the
stored session log with the offline reader (``TETHER_STORE_URL``; secrets were redacted before
they were stored), and the chat messages they amount to.

A session that is no longer stored (or a line with no runs) has an empty transcript: reports and
exports still carry the line, with its output and scores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tether.core.events import EventType
from tether.errors import SessionNotFound

if TYPE_CHECKING:
    from tether.core.events import AgentEvent
    from tether.persistence.reader import SessionLogReader
    from tether.producer.ops.batch.results import CaseResult
    from tether.settings import Settings

Role = Literal["user", "assistant", "tool"]


@dataclass(frozen=True)
class Message:
    """One chat message of a transcript (``tool_calls``: ``(id, name, arguments)`` triples)."""

    role: Role
    content: str
    tool_calls: tuple[tuple[str, str, str], ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


def reader_from_settings(settings: Settings) -> SessionLogReader:
    """The offline reader over the store and archive the settings name."""
    from tether.persistence.reader import SessionLogReader
    from tether.persistence.storage_url import storage_from_settings

    store, archive = storage_from_settings(settings)
    return SessionLogReader(store, archive)


def case_events(reader: SessionLogReader, result: CaseResult, tenant: str) -> list[AgentEvent]:
    """The events of the line's runs, in sequence order ([] when the session is gone)."""
    if not result.run_ids:
        return []
    try:
        events = reader.events(result.session_id, tenant=tenant)
    except SessionNotFound:
        return []
    wanted = set(result.run_ids)
    return [e for e in events if e.run_id in wanted]


def to_messages(events: list[AgentEvent]) -> list[Message]:
    """The conversation the events record: user inputs, model replies (with their tool calls)
    and tool results, in order."""
    messages: list[Message] = []
    for event in events:
        payload: Any = event.payload
        if event.type is EventType.USER_INPUT:
            messages.append(Message("user", payload.item.content))
        elif event.type is EventType.MODEL_RESPONSE:
            calls = tuple((c.id, c.name, c.arguments) for c in payload.tool_calls)
            messages.append(Message("assistant", payload.text or "", tool_calls=calls))
        elif event.type is EventType.TOOL_RESULT:
            item = payload.item
            messages.append(
                Message("tool", item.output, tool_call_id=item.call_id, name=item.name or None)
            )
    return messages


def event_row(event: AgentEvent) -> dict[str, Any]:
    """An event as a small JSON object for display: seq, type, step and its payload."""
    payload = event.payload.model_dump(mode="json", exclude={"kind"})
    return {
        "seq": event.seq,
        "type": event.type.value,
        "step": event.step,
        "ts_ms": event.ts_ms,
        "payload": payload,
    }


__all__ = ["Message", "case_events", "event_row", "reader_from_settings", "to_messages"]
