"""Compaction policies: the reference scenarios of test/ai4j/agent/compact/* and
AgentMemoryCompactContextProjectorTest, plus the tool-pair property of the LLM cut."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.core.context import ContextBudget
from tether.core.items import (
    ITEMS_ADAPTER,
    AssistantMessage,
    Item,
    Reasoning,
    ToolCall,
    ToolCallsMessage,
    ToolOutput,
    UserMessage,
    approx_chars,
)
from tether.core.memory import MemorySnapshot
from tether.errors import ConfigurationError
from tether.models.base import ModelRequest, ModelResponse
from tether.models.scripted import ScriptedModel
from tether.runtime.compaction import (
    AUTHORITATIVE_NOTE,
    SUMMARY_MARKER,
    CompactPolicy,
    KeepLastPolicy,
    LlmCompactPolicy,
    StructuredSummaryPolicy,
    find_safe_cut,
)
from tether.runtime.llm_summary import extract_file_paths

CONVERSATION_MARK = "Conversation to summarize:\n"


def user(text: str) -> UserMessage:
    return UserMessage(content=text)


def assistant(text: str) -> AssistantMessage:
    return AssistantMessage(content=text)


def call(call_id: str, name: str = "read", **args: str) -> ToolCallsMessage:
    return ToolCallsMessage(
        tool_calls=(ToolCall(id=call_id, name=name, arguments=json.dumps(args)),)
    )


def out(call_id: str) -> ToolOutput:
    return ToolOutput(call_id=call_id, output=f"result of {call_id}")


def texts(items: tuple[Item, ...]) -> list[str]:
    return [i.content for i in items if isinstance(i, UserMessage | AssistantMessage)]


def summarized_items(request: ModelRequest) -> list[Item]:
    """The items a summary request carried, read back from its user message."""
    (message,) = request.items
    assert isinstance(message, UserMessage)
    return ITEMS_ADAPTER.validate_json(message.content.split(CONVERSATION_MARK, 1)[1])


# --- KeepLastPolicy and StructuredSummaryPolicy -------------------------------------------


def test_policies_satisfy_the_protocol() -> None:
    budget = ContextBudget(max_items=1)
    policies = [
        KeepLastPolicy(1, "s"),
        StructuredSummaryPolicy(budget),
        LlmCompactPolicy(ScriptedModel(), "m", 1),
    ]
    assert all(isinstance(p, CompactPolicy) for p in policies)


def test_keep_last_policy() -> None:
    snapshot = MemorySnapshot(items=(user("one"), user("two"), user("three")))
    policy = KeepLastPolicy(1, "fixed")
    assert policy.should_compact(snapshot) and not KeepLastPolicy(3, "s").should_compact(snapshot)
    result = policy.compact(snapshot)
    assert texts(result.memory.items) == ["three"]
    assert result.memory.summary == result.summary == "fixed"
    assert result.context_report is not None and result.context_report.dropped_item_count == 2
    assert KeepLastPolicy(0, "s").compact(snapshot).memory.items == ()
    with pytest.raises(ConfigurationError, match="keep=-1"):
        KeepLastPolicy(-1, "s")


def test_structured_policy_keeps_goal_and_recent_with_previous_summary() -> None:
    items = (
        user("goal"),
        assistant("done"),
        user("pending"),
        assistant("decision"),
        user("recent"),
    )
    snapshot = MemorySnapshot(items=items, summary="previous summary")
    policy = StructuredSummaryPolicy(ContextBudget(max_items=2, pinned_prefix_items=1))
    result = policy.compact(snapshot)
    assert texts(result.memory.items) == ["goal", "recent"]
    assert result.summary is not None and result.summary == result.memory.summary
    assert result.summary.split("\n") == [
        SUMMARY_MARKER,
        "Existing summary:",
        "previous summary",
        "Context projection: 2/5 items retained, 3 dropped.",
        AUTHORITATIVE_NOTE,
    ]
    assert result.context_report is not None and result.context_report.dropped_item_count == 3
    assert snapshot.items == items and snapshot.summary == "previous summary"


def test_structured_policy_three_messages_drops_one() -> None:
    snapshot = MemorySnapshot(items=(user("goal"), user("old"), user("recent")))
    result = StructuredSummaryPolicy(ContextBudget(max_items=2, pinned_prefix_items=1)).compact(
        snapshot
    )
    assert texts(result.memory.items) == ["goal", "recent"]
    assert result.context_report is not None and result.context_report.dropped_item_count == 1
    assert result.summary is not None and "Existing summary" not in result.summary


def test_structured_policy_triggers() -> None:
    def snap(n: int) -> MemorySnapshot:
        return MemorySnapshot(items=tuple(user(f"m{i}") for i in range(n)))

    policy = StructuredSummaryPolicy(ContextBudget(max_items=3))
    assert policy.should_compact(snap(4))
    assert not any(policy.should_compact(snap(n)) for n in (0, 2, 3))
    late = StructuredSummaryPolicy(ContextBudget(max_items=3), trigger_items=5)
    assert not late.should_compact(snap(5)) and late.should_compact(snap(6))
    assert not StructuredSummaryPolicy(ContextBudget()).should_compact(snap(100))
    size = approx_chars(user("m0"))
    by_chars = StructuredSummaryPolicy(ContextBudget(max_approx_chars=2 * size))
    assert not by_chars.should_compact(snap(2)) and by_chars.should_compact(snap(3))
    assert texts(by_chars.compact(snap(3)).memory.items) == ["m1", "m2"]


# --- the safe cut -------------------------------------------------------------------------


def test_turn_boundary_cut() -> None:
    items = (user("u1"), call("c1"), out("c1"), user("u2"), call("c2"), out("c2"))
    assert [find_safe_cut(items, cut) for cut in (0, 3, 4, 5)] == [0, 3, 3, 3]
    assert find_safe_cut(items, 6) == 6
    assistants = (assistant("a"), assistant("b"), assistant("c"))
    assert find_safe_cut(assistants, 1) == 1


def test_cut_walks_past_a_user_message_that_would_split_a_tool_pair() -> None:
    # c1's output arrived after the next user message (an async tool), so u2 is not a safe cut.
    items = (user("u1"), call("c1"), user("u2"), out("c1"), assistant("a"))
    assert find_safe_cut(items, 2) == 0
    no_users = (assistant("a"), call("c1"), assistant("b"), out("c1"), assistant("c"))
    assert find_safe_cut(no_users, 3) == 1


def test_llm_policy_keeps_a_whole_turn() -> None:
    items = (user("u1"), call("c1"), out("c1"), user("u2"), call("c2"), out("c2"))
    model = ScriptedModel(default_text='{"goal": "g"}')
    policy = LlmCompactPolicy(model, "summarizer", max_items=2)
    assert policy.should_compact(MemorySnapshot(items=items))
    assert not policy.should_compact(MemorySnapshot(items=items[:2]))
    result = policy.compact(MemorySnapshot(items=items))
    assert result.memory.items == items[3:]
    assert summarized_items(model.requests[0]) == list(items[:3])
    assert model.requests[0].model == "summarizer"
    assert result.context_report is not None and result.context_report.dropped_item_count == 3


def test_llm_policy_without_anything_to_summarize_makes_no_call() -> None:
    model = ScriptedModel(default_text=None)
    items = (call("c1"), out("c1"))
    snapshot = MemorySnapshot(items=items, summary="keep me")
    result = LlmCompactPolicy(model, "m", max_items=1).compact(snapshot)
    assert result.memory == snapshot and len(model.requests) == 0


@st.composite
def conversations(draw: st.DrawFn) -> list[Item]:
    """Random turns; some tool outputs arrive one or two turns late (async tools)."""
    items: list[Item] = []
    late: list[tuple[int, ToolOutput]] = []
    turns = draw(st.integers(0, 20))
    for turn in range(turns):
        kind = draw(st.sampled_from(["user", "user", "assistant", "reasoning", "tools", "tools"]))
        if kind == "user":
            items.append(user(f"u{turn}"))
        elif kind == "assistant":
            items.append(assistant(f"a{turn}"))
        elif kind == "reasoning":
            items.append(Reasoning(text=f"r{turn}"))
        else:
            ids = [f"t{turn}-{k}" for k in range(draw(st.integers(1, 3)))]
            items.append(
                ToolCallsMessage(tool_calls=tuple(ToolCall(id=i, name="read") for i in ids))
            )
            for call_id in ids:
                delay = draw(st.sampled_from([0, 0, 0, 1, 2]))
                late.append((turn + delay, out(call_id)))
        items.extend(o for due, o in late if due <= turn)
        late = [(due, o) for due, o in late if due > turn]
    items.extend(o for _, o in late)
    return items


def pair_split(items: list[Item], cut: int) -> bool:
    def ids(part: list[Item]) -> set[str]:
        found: set[str] = set()
        for item in part:
            if isinstance(item, ToolCallsMessage):
                found.update(c.id for c in item.tool_calls)
            elif isinstance(item, ToolOutput):
                found.add(item.call_id)
        return found

    return bool(ids(items[:cut]) & ids(items[cut:]))


@settings(max_examples=250, deadline=None)
@given(items=conversations(), max_items=st.integers(0, 12))
def test_llm_cut_never_separates_a_tool_call_from_its_output(
    items: list[Item], max_items: int
) -> None:
    model = ScriptedModel(default_text='{"goal": "keep going"}')
    snapshot = MemorySnapshot(items=tuple(items), summary="prev")
    result = LlmCompactPolicy(model, "m", max_items).compact(snapshot)
    kept = list(result.memory.items)
    cut = len(items) - len(kept)
    assert kept == items[cut:]
    assert not pair_split(items, cut)
    naive_cut = len(items) - min(max_items, len(items))
    assert cut <= naive_cut
    if naive_cut == len(items):
        expected = naive_cut  # keep nothing: everything is summarized
    else:
        safe = [c for c in range(naive_cut + 1) if not pair_split(items, c)]
        user_cuts = [c for c in safe if isinstance(items[c], UserMessage)]
        expected = max(user_cuts) if user_cuts else max(safe)
    assert cut == expected
    if cut == 0:
        assert len(model.requests) == 0 and result.memory == snapshot
    else:
        assert summarized_items(model.requests[0]) == items[:cut]
        assert result.summary == result.memory.summary == "## Goal\nkeep going"
    assert snapshot.items == tuple(items)


# --- the summary call ---------------------------------------------------------------------

SIX_ITEMS = (
    user("add login"),
    assistant("planning"),
    assistant("wrote code"),
    user("now test it"),
    assistant("running tests"),
    assistant("all green"),
)

FULL_JSON = {
    "goal": "Add login",
    "completed": ["Wrote auth module"],
    "pending": ["Add logout"],
    "decisions": ["Use JWT sessions"],
    "errors": ["pytest -k auth failed once"],
    "testResults": ["12 passed"],
    "openQuestions": ["Token lifetime?"],
}


def test_structured_json_fills_the_result() -> None:
    model = ScriptedModel([ModelResponse.final(json.dumps(FULL_JSON))])
    result = LlmCompactPolicy(model, "m", max_items=3).compact(MemorySnapshot(items=SIX_ITEMS))
    assert result.memory.items == SIX_ITEMS[3:]
    assert result.completed == ("Wrote auth module",)
    assert result.pending == ("Add logout",)
    assert result.decisions == ("Use JWT sessions",)
    assert result.failed_commands == ("pytest -k auth failed once",)
    assert result.test_results == ("12 passed",)
    assert result.open_questions == ("Token lifetime?",)
    assert result.summary is not None and result.summary == result.memory.summary
    for heading in ("## Goal", "## Completed", "## Pending", "## Key Decisions", "## Errors"):
        assert heading in result.summary
    assert "## Test Results" in result.summary and "## Open Questions" in result.summary
    assert "- Use JWT sessions" in result.summary.split("\n")
    (request,) = model.requests
    assert request.system_prompt is not None and "JSON" in request.system_prompt
    assert request.tools == ()


def test_fenced_json_with_prose_and_strings_for_lists() -> None:
    wrapped = (
        "Here is the summary you asked for:\n```json\n"
        '{"goal": "Add login", "completed": "Wrote auth module", "decisions": ["Use JWT"]}\n'
        "```\nLet me know if you need more."
    )
    model = ScriptedModel([ModelResponse.final(wrapped)])
    result = LlmCompactPolicy(model, "m", max_items=3).compact(MemorySnapshot(items=SIX_ITEMS))
    assert result.completed == ("Wrote auth module",)
    assert result.decisions == ("Use JWT",)
    assert result.summary is not None and result.summary.startswith("## Goal\nAdd login")


def test_prose_output_becomes_the_summary() -> None:
    prose = "The user wants login; tests pass. {not json}"
    model = ScriptedModel([ModelResponse.final(prose)])
    result = LlmCompactPolicy(model, "m", max_items=3).compact(MemorySnapshot(items=SIX_ITEMS))
    assert result.summary == prose
    assert result.completed == result.pending == result.decisions == ()
    assert result.memory.items == SIX_ITEMS[3:]


def test_failing_model_gives_the_unavailable_summary() -> None:
    model = ScriptedModel(default_text=None)  # raises ModelError when asked
    result = LlmCompactPolicy(model, "m", max_items=3).compact(
        MemorySnapshot(items=SIX_ITEMS, summary="older facts")
    )
    assert result.summary is not None
    assert result.summary.startswith(
        "Compaction summary unavailable (LLM summarization failed). 3 items were summarized."
    )
    assert "older facts" in result.summary
    assert result.memory.items == SIX_ITEMS[3:]

    def boom(request: ModelRequest) -> ModelResponse:
        raise RuntimeError("connection reset")

    crashed = LlmCompactPolicy(ScriptedModel(responder=boom), "m", 3).compact(
        MemorySnapshot(items=SIX_ITEMS)
    )
    assert crashed.summary is not None
    assert crashed.summary.startswith("Compaction summary unavailable")
    empty = LlmCompactPolicy(ScriptedModel([ModelResponse.final("  ")]), "m", 3).compact(
        MemorySnapshot(items=SIX_ITEMS)
    )
    assert empty.summary is not None and empty.summary.startswith("Compaction summary unavailable")


def test_previous_summary_is_in_the_prompt() -> None:
    model = ScriptedModel([ModelResponse.final("{}")])
    LlmCompactPolicy(model, "m", max_items=3).compact(
        MemorySnapshot(items=SIX_ITEMS, summary="  earlier: chose Postgres  ")
    )
    (message,) = model.requests[0].items
    assert isinstance(message, UserMessage)
    assert message.content.startswith("Previous summary:\nearlier: chose Postgres\n")
    assert "Files read" not in message.content


# --- file tracking ------------------------------------------------------------------------


def test_file_extraction() -> None:
    items: list[Item] = [
        call("c1", "read", path="src/a.py"),
        call("c2", "write", file="src/b.py"),
        call("c3", "edit", path="src/a.py"),
        call("c4", "read", path="src/a.py"),
        call("c5", "grep", path="src/a.py", pattern="x"),
        call("c6", "read_file", path="README.md"),
        call("c7", "apply_patch", path="src/c.py"),
        call("c8", "delete", file="tmp.txt"),
        call("c9", "run_tests", path="tests"),
        call("c10", "read"),
        ToolCallsMessage(tool_calls=(ToolCall(id="c11", name="Read", arguments="not json"),)),
        ToolCallsMessage(tool_calls=(ToolCall(id="c12", name="write", arguments='["x"]'),)),
        out("c1"),
        user("read src/zzz.py please"),
    ]
    read, modified = extract_file_paths(items)
    assert read == ("src/a.py", "README.md")
    assert modified == ("src/b.py", "src/a.py", "src/c.py", "tmp.txt")


def test_file_lists_reach_the_result_and_the_prompt() -> None:
    items = (
        user("fix it"),
        call("c1", "read", path="src/a.py"),
        out("c1"),
        call("c2", "write", path="src/a.py"),
        out("c2"),
        user("thanks"),
        assistant("welcome"),
    )
    model = ScriptedModel([ModelResponse.final('{"goal": "fix"}')])
    result = LlmCompactPolicy(model, "m", max_items=2).compact(MemorySnapshot(items=items))
    assert result.read_files == ("src/a.py",) and result.modified_files == ("src/a.py",)
    (message,) = model.requests[0].items
    assert isinstance(message, UserMessage)
    assert 'Files read: ["src/a.py"]\nFiles modified: ["src/a.py"]' in message.content
    assert result.summary is not None and "## Files Modified\n- src/a.py" in result.summary


def test_negative_limits_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_items=-1"):
        LlmCompactPolicy(ScriptedModel(), "m", -1)
    with pytest.raises(ConfigurationError, match="trigger_items=-2"):
        StructuredSummaryPolicy(ContextBudget(), trigger_items=-2)
