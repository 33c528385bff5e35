"""Version-1 documents written by earlier builds must keep loading with the same values.

The fixtures are static files (generated once by ``tests/fixtures/make_v1_fixtures.py``); these
tests never regenerate them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.core.events import (
    AgentEvent,
    CompactPayload,
    EmptyPayload,
    ErrorPayload,
    EventType,
    ModelResponsePayload,
    RestoredPayload,
    ToolResultPayload,
    Usage,
)
from tether.core.items import ToolCallsMessage, ToolOutput
from tether.errors import UnsupportedSchemaVersion
from tether.persistence import codec
from tether.persistence.codec import dumps_event, loads_event, loads_events, loads_snapshot

FIXTURES = Path(__file__).parent / "fixtures"


def test_snapshot_v1_fixture_loads_with_its_values() -> None:
    snapshot = loads_snapshot((FIXTURES / "snapshot_v1.json").read_bytes(), where="fixture")

    assert snapshot.schema_version == 1
    assert snapshot.session_id == "golden-1"
    assert snapshot.tenant == "acme"
    assert snapshot.metadata.created_at_ms == 1_700_000_000_000
    assert snapshot.metadata.parent_session_id == "golden-0"
    assert snapshot.metadata.attributes == {
        "user": "u-42",
        "tags": ["beta", "eu"],
        "quota": {"runs": 3},
        "vip": True,
    }
    items = snapshot.memory.items
    assert [item.type for item in items] == [
        "user_message",
        "reasoning",
        "tool_calls",
        "tool_output",
        "assistant_message",
    ]
    assert isinstance(items[2], ToolCallsMessage)
    assert items[2].tool_calls[0].arguments == '{"city": "Zürich"}'
    assert isinstance(items[3], ToolOutput) and items[3].call_id == "call-7"
    assert snapshot.memory.summary == "The user asked about the weather."
    assert [e.seq for e in snapshot.events] == [2, 4, 14]
    assert [e.type for e in snapshot.events] == [
        EventType.USER_INPUT,
        EventType.MODEL_RESPONSE,
        EventType.ERROR,
    ]
    assert (snapshot.last_seq, snapshot.archived_seq) == (15, 11)
    assert snapshot.last_compact is not None
    assert snapshot.last_compact.summary == "compacted"
    assert snapshot.last_compact.modified_files == ("notes.md",)
    assert [r.request_id for r in snapshot.applied] == ["req-1", "req-2"]
    assert snapshot.applied[0].usage.total_tokens == 16
    assert snapshot.applied[1].error_type == "RunTimeout"
    assert snapshot.find_applied("req-2") is snapshot.applied[1]


def test_events_v1_fixture_loads_every_payload_kind() -> None:
    events = loads_events((FIXTURES / "events_v1.json").read_bytes(), where="fixture")

    assert [e.seq for e in events] == list(range(1, 16))
    assert {e.tenant for e in events} == {"acme"}
    assert {e.session_id for e in events} == {"golden-1"}
    kinds = [e.payload.kind for e in events]
    assert kinds == [
        "text",
        "user_input",
        "model_request",
        "model_response",
        "tool_call",
        "tool_result",
        "tool_output_replaced",
        "items_appended",
        "usage",
        "compact",
        "projection",
        "restored",
        "restored",
        "error",
        "none",
    ]
    response = events[3].payload
    assert isinstance(response, ModelResponsePayload)
    assert response.tool_calls[0].name == "get_weather"
    assert response.usage.input_tokens == 12
    result = events[5].payload
    assert isinstance(result, ToolResultPayload) and result.status == "WAITING"
    compact = events[9].payload
    assert isinstance(compact, CompactPayload) and compact.result.memory.summary == "s"
    by_value, by_reference = events[11].payload, events[12].payload
    assert isinstance(by_value, RestoredPayload) and by_value.memory is not None
    assert isinstance(by_reference, RestoredPayload)
    assert (by_reference.memory, by_reference.base_seq) == (None, 12)
    assert by_reference.checksum == "ab" * 32
    error = events[13].payload
    assert isinstance(error, ErrorPayload) and error.retryable is True
    assert isinstance(events[14].payload, EmptyPayload)
    assert events[14].ts_ms == 1_700_000_000_015


def test_v1_usage_reads_without_cached_or_reasoning_tokens_and_keeps_its_bytes() -> None:
    events = loads_events((FIXTURES / "events_v1.json").read_bytes(), where="fixture")
    old = [json.loads(dumps_event(e)) for e in events]
    response = events[3].payload
    assert isinstance(response, ModelResponsePayload)
    assert (response.usage.cached_tokens, response.usage.reasoning_tokens) == (0, 0)
    # written again, a usage without the new counts is the v1 document it was read from
    fixture = json.loads((FIXTURES / "events_v1.json").read_bytes())
    assert old == fixture
    assert all(doc["v"] == 1 for doc in old)


def test_cached_and_reasoning_tokens_are_summed_and_make_the_event_v3(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = Usage(input_tokens=10, output_tokens=4, total_tokens=14, cached_tokens=6)
    second = Usage(input_tokens=5, output_tokens=9, total_tokens=14, reasoning_tokens=7)
    assert first + second == Usage(
        input_tokens=15, output_tokens=13, total_tokens=28, cached_tokens=6, reasoning_tokens=7
    )
    event = AgentEvent(type=EventType.MODEL_RESPONSE, payload=ModelResponsePayload(usage=first))
    doc = json.loads(dumps_event(event))
    assert doc["v"] == 3 and doc["payload"]["usage"]["cached_tokens"] == 6
    assert "reasoning_tokens" not in doc["payload"]["usage"]  # a zero count is left out
    assert loads_event(dumps_event(event)) == event
    plain = AgentEvent(type=EventType.MODEL_RESPONSE, payload=ModelResponsePayload(usage=Usage()))
    assert json.loads(dumps_event(plain))["v"] == 1
    with monkeypatch.context() as older_build:  # a build that reads v1 and v2 says to upgrade
        older_build.setattr(codec, "SUPPORTED_EVENT_VERSIONS", (1, 2))
        with pytest.raises(UnsupportedSchemaVersion, match="Upgrade Tether"):
            loads_event(dumps_event(event))
