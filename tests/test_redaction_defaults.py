"""#19: common credential formats are masked by default, in inputs, outputs, tool arguments and
tool results, before memory, events, snapshots or the archive see them."""

from __future__ import annotations

import json

import pytest

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.events import AgentEvent, EventType, ItemsAppendedPayload
from tether.core.items import ExternalItem, ToolOutput
from tether.models.base import ModelRequest
from tether.persistence.archives.memory import InMemoryEventArchive
from tether.persistence.stores.memory import InMemorySnapshotStore
from tether.runtime.redaction import DEFAULT_REDACTOR, redact_event, secret_redactor

PLANTED = {
    "openai": "sk-proj-" + "Q7x" * 10,
    "aws": "AKIA" + "IOSFODNN7EXAMPL1",
    "bearer": "Bearer " + "eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl",
    "github": "ghp_" + "a1B2" * 9,
}


@tool
def fetch(url: str, token: str) -> str:
    """Fetch a URL (echoes what it was given, as a careless tool would)."""
    return f"fetched {url} with {token}"


def _agent(**kw: object) -> Agent:
    def respond(request: ModelRequest) -> ModelResponse:
        last = request.items[-1]
        if isinstance(last, ToolOutput):
            return ModelResponse.final(f"done: {last.output}")
        return ModelResponse.call(
            "call_1", "fetch", {"url": "https://api.example.com", "token": PLANTED["github"]}
        )

    return Agent(ScriptedModel(responder=respond), tools=[fetch], **kw)  # type: ignore[arg-type]


def _planted_input() -> str:
    return "use these: " + " ".join(PLANTED.values())


def _leaks(text: str) -> list[str]:
    secret_parts = [v.removeprefix("Bearer ") for v in PLANTED.values()]
    return [part for part in secret_parts if part in text]


def test_planted_secrets_never_reach_memory_events_snapshot_or_archive() -> None:
    store, archive = InMemorySnapshotStore(), InMemoryEventArchive()
    agent = _agent(store=store, archive=archive)
    session = agent.new_session("s-secrets")
    result = session.run(_planted_input())
    session.save()
    assert result.output is not None and not _leaks(result.output)
    stored = store.load("default", "s-secrets")
    assert stored is not None
    everything = (
        json.dumps(stored.snapshot.to_json_dict())
        + "".join(e.model_dump_json() for e in session.events)
        + "".join(e.model_dump_json() for e in archive.read("default", "s-secrets"))
    )
    assert _leaks(everything) == []
    assert "***" in everything


def test_the_tool_still_runs_and_the_model_sees_masked_text() -> None:
    session = _agent().new_session("s-tool")
    result = session.run(_planted_input())
    assert result.output is not None and result.output.startswith("done: fetched")
    assert "***" in result.output


def test_own_redactor_runs_after_the_defaults_and_none_turns_redaction_off() -> None:
    own = _agent(redact=secret_redactor(["example.com"])).new_session("s-own")
    text = own.run(_planted_input()).output or ""
    assert not _leaks(text) and "example.com" not in text
    raw = _agent(redact=None).new_session("s-raw")
    assert PLANTED["github"] in (raw.run("hi").output or "")


@pytest.mark.parametrize("ordinary", ["ask the task-based skills", "sk-short", "AKIA1", "bearer x"])
def test_ordinary_text_is_left_alone(ordinary: str) -> None:
    assert DEFAULT_REDACTOR(ordinary) == ordinary


def test_default_redaction_is_idempotent() -> None:
    once = DEFAULT_REDACTOR(_planted_input())
    assert DEFAULT_REDACTOR(once) == once


def test_opaque_reasoning_state_is_kept_byte_for_byte() -> None:
    """A model's ``encrypted_content`` is URL-safe base64 the next call must send back as it
    was: a blob that happens to hold ``-sk-`` and 20 more such characters is not a pasted key."""
    blob = "gAAAAABp" + "Zm9v" * 8 + "-sk-" + "a1_B-" * 6 + "Q=="
    assert DEFAULT_REDACTOR(blob) != blob  # the pattern would mask it as text
    reasoning = {"type": "reasoning", "encrypted_content": blob, "summary": [{"text": blob}]}
    event = AgentEvent(
        type=EventType.MEMORY_ITEMS_APPENDED,
        tenant="default",
        session_id="s-opaque",
        seq=1,
        payload=ItemsAppendedPayload(
            items=(ExternalItem(source="openai-agents", text="", data=reasoning),)
        ),
    )
    cleaned = redact_event(event, DEFAULT_REDACTOR)
    assert isinstance(cleaned.payload, ItemsAppendedPayload)
    data = cleaned.payload.items[0].data  # type: ignore[union-attr]
    assert data["encrypted_content"] == blob
    assert data["summary"] == [{"text": DEFAULT_REDACTOR(blob)}]  # text a person reads: masked


def test_a_secret_under_any_other_key_or_as_a_key_is_masked() -> None:
    """Only a reasoning (or compaction) item's own ``encrypted_content`` is opaque: the same
    key in a tool's output, a nested ``kind``, and a dict key holding a secret are redacted
    (every key named ``kind`` or ``encrypted_content`` was skipped at any depth, and keys were
    never redacted)."""
    pasted = "sk-proj-" + "Zx9" * 10
    items = (
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [{"type": "input_text", "encrypted_content": pasted, "kind": pasted}],
        },
        {"role": "user", "content": "see", "metadata": {pasted: "as a key"}},
        {"type": "message", "role": "user", "content": [{"kind": pasted, "text": "x"}]},
    )
    event = AgentEvent(
        type=EventType.MEMORY_ITEMS_APPENDED,
        tenant="default",
        session_id="s-keys",
        seq=1,
        payload=ItemsAppendedPayload(
            items=tuple(ExternalItem(source="openai-agents", text="", data=d) for d in items)
        ),
    )
    cleaned = redact_event(event, DEFAULT_REDACTOR)
    text = cleaned.model_dump_json()
    assert pasted[:12] not in text
    assert text.count("***") == 4
    assert cleaned.payload.kind == event.payload.kind  # the payload's own tag stays


def test_an_item_holding_a_json_schema_with_a_list_of_types_is_redacted() -> None:
    """A JSON Schema's ``type`` may be a list (``["string", "null"]``, an MCP tool listing's
    nullable parameter): looking it up among the opaque item types raised ``TypeError``
    (unhashable), and the item could never be stored."""
    schema = {"type": "object", "properties": {"q": {"type": ["string", "null"]}}}
    data = {"type": "mcp_list_tools", "tools": [{"name": "find", "input_schema": schema}]}
    event = AgentEvent(
        type=EventType.MEMORY_ITEMS_APPENDED,
        tenant="default",
        session_id="s-schema",
        seq=1,
        payload=ItemsAppendedPayload(
            items=(ExternalItem(source="openai-agents", text="", data=data),)
        ),
    )
    assert redact_event(event, DEFAULT_REDACTOR) is event  # nothing to mask, nothing changed
