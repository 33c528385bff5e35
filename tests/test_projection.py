"""Context projection: the reference scenarios of AgentMemoryCompactContextProjectorTest and
TypeAwareContextProjectorTest, plus tool-pair safety and non-mutation properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.core.context import ContextBudget
from tether.core.items import (
    AssistantMessage,
    Item,
    Reasoning,
    ToolCall,
    ToolCallsMessage,
    ToolOutput,
    UserMessage,
    approx_chars,
)
from tether.runtime.projection import (
    CHARS_PER_TOKEN,
    DefaultContextProjector,
    Projection,
    TypeAwareContextProjector,
    approx_tokens,
    clear_old_tool_results,
    trim_old_reasoning,
)


def calls(*call_ids: str, name: str = "read") -> ToolCallsMessage:
    return ToolCallsMessage(tool_calls=tuple(ToolCall(id=c, name=name) for c in call_ids))


def out(call_id: str, output: str = "payload", name: str = "") -> ToolOutput:
    return ToolOutput(call_id=call_id, output=output, name=name)


def tool_rounds(n: int, payload_chars: int = 10) -> list[Item]:
    items: list[Item] = [UserMessage(content="inspect the files")]
    for k in range(1, n + 1):
        items.append(calls(f"call-{k}"))
        items.append(out(f"call-{k}", f"payload-{k}-" + "x" * payload_chars))
    return items


def texts(items: tuple[Item, ...]) -> list[str]:
    return [i.content for i in items if isinstance(i, UserMessage | AssistantMessage)]


# --- DefaultContextProjector ----------------------------------------------------------------


def test_item_limit_keeps_pinned_prefix_and_newest() -> None:
    items: list[Item] = [
        UserMessage(content="system-summary"),
        UserMessage(content="old-1"),
        AssistantMessage(content="old-2"),
        UserMessage(content="recent-1"),
        AssistantMessage(content="recent-2"),
    ]
    projected, report = DefaultContextProjector().project(
        items, ContextBudget(max_items=3, pinned_prefix_items=1)
    )
    assert texts(projected) == ["system-summary", "recent-1", "recent-2"]
    assert (report.source_item_count, report.projected_item_count) == (5, 3)
    assert report.dropped_item_count == 2
    assert report.item_limit_applied and not report.character_limit_applied
    assert report.notes == ("maxItems applied: 3",)
    assert report.source_approx_chars == sum(map(approx_chars, items))
    assert report.projected_approx_chars == sum(map(approx_chars, projected))


def test_item_limit_edges() -> None:
    items: list[Item] = [UserMessage(content=f"m{i}") for i in range(4)]
    projector = DefaultContextProjector()
    empty, report = projector.project(items, ContextBudget(max_items=0))
    assert empty == () and report.dropped_item_count == 4 and report.item_limit_applied
    same, report = projector.project(items, ContextBudget(max_items=4, pinned_prefix_items=9))
    assert same == tuple(items) and not report.item_limit_applied and report.notes == ()
    pinned_only, _ = projector.project(items, ContextBudget(max_items=2, pinned_prefix_items=5))
    assert texts(pinned_only) == ["m0", "m1"]


def test_no_limits_and_empty_input() -> None:
    items: list[Item] = [UserMessage(content="a"), AssistantMessage(content="b")]
    projected, report = DefaultContextProjector().project(items, ContextBudget())
    assert projected == tuple(items) and report.dropped_item_count == 0
    nothing, report = DefaultContextProjector().project([], ContextBudget(max_items=3))
    assert nothing == () and report.source_item_count == 0 and report.projected_approx_chars == 0


def test_char_limit_keeps_newest_that_fit_and_pinned() -> None:
    items: list[Item] = [UserMessage(content=f"msg-{i}") for i in range(5)]
    size = approx_chars(items[0])
    assert all(approx_chars(i) == size for i in items)
    projector = DefaultContextProjector()
    newest, report = projector.project(items, ContextBudget(max_approx_chars=3 * size))
    assert texts(newest) == ["msg-2", "msg-3", "msg-4"]
    assert report.character_limit_applied and not report.item_limit_applied
    assert report.notes == (f"maxApproxChars applied: {3 * size}",)
    assert report.projected_approx_chars == 3 * size
    pinned, _ = projector.project(
        items, ContextBudget(max_approx_chars=3 * size, pinned_prefix_items=1)
    )
    assert texts(pinned) == ["msg-0", "msg-3", "msg-4"]


def test_char_limit_skips_items_that_no_longer_fit_and_always_keeps_one() -> None:
    small_a, big, small_b = (
        UserMessage(content="a"),
        UserMessage(content="B" * 500),
        UserMessage(content="c"),
    )
    limit = approx_chars(small_a) + approx_chars(small_b)
    projector = DefaultContextProjector()
    projected, _ = projector.project([small_a, big, small_b], ContextBudget(max_approx_chars=limit))
    assert projected == (small_a, small_b)  # the reference walks on past an item that is too big
    only_newest, report = projector.project([small_a, big], ContextBudget(max_approx_chars=10))
    assert only_newest == (big,) and report.projected_approx_chars > 10
    nothing, _ = projector.project([small_a, big], ContextBudget(max_approx_chars=0))
    assert nothing == ()


def test_item_then_char_limit_both_reported() -> None:
    items: list[Item] = [UserMessage(content=f"msg-{i}") for i in range(6)]
    size = approx_chars(items[0])
    projected, report = DefaultContextProjector().project(
        items, ContextBudget(max_items=4, max_approx_chars=2 * size)
    )
    assert texts(projected) == ["msg-4", "msg-5"]
    assert report.item_limit_applied and report.character_limit_applied
    assert report.notes == ("maxItems applied: 4", f"maxApproxChars applied: {2 * size}")


def test_item_limit_does_not_orphan_a_tool_output() -> None:
    items: list[Item] = [
        UserMessage(content="go"),
        calls("c1"),
        out("c1"),
        AssistantMessage(content="done"),
    ]
    budget = ContextBudget(max_items=2)
    projected, report = DefaultContextProjector().project(items, budget)
    assert projected == (items[3],)
    assert report.dropped_item_count == 3
    assert report.notes[-1] == "tool-pair repair: dropped 1 item(s) whose call or output was cut"
    raw, _ = DefaultContextProjector(keep_tool_pairs=False).project(items, budget)
    assert raw == (items[2], items[3])


def test_cut_output_drops_whole_multi_call_message() -> None:
    items: list[Item] = [
        UserMessage(content="go"),
        calls("c1", "c2"),
        out("c1", "A" * 400),
        out("c2", "b"),
        AssistantMessage(content="done"),
    ]
    limit = sum(approx_chars(items[i]) for i in (1, 3, 4))
    projected, _ = DefaultContextProjector().project(items, ContextBudget(max_approx_chars=limit))
    # Without repair the char limit keeps [calls, out(c2), done]: c1 would lack its output.
    assert projected == (items[4],)


def test_pairs_broken_in_the_source_are_left_alone() -> None:
    items: list[Item] = [out("orphan"), UserMessage(content="a"), UserMessage(content="b")]
    projected, report = DefaultContextProjector().project(items, ContextBudget(max_items=3))
    assert projected == tuple(items) and report.notes == ()
    trimmed, _ = DefaultContextProjector().project(items, ContextBudget(max_items=1))
    assert texts(trimmed) == ["b"]


def test_approx_tokens_rounds_up() -> None:
    items: list[Item] = [UserMessage(content="hello"), AssistantMessage(content="x")]
    chars = sum(map(approx_chars, items))
    assert approx_tokens(items) == -(-chars // CHARS_PER_TOKEN)
    assert approx_tokens(items) * CHARS_PER_TOKEN >= chars
    assert approx_tokens([]) == 0


# --- TypeAwareContextProjector --------------------------------------------------------------


def test_tier1_clears_all_but_recent_tool_results_without_mutating() -> None:
    items = tool_rounds(5)
    before = list(items)
    projected, report = TypeAwareContextProjector().project(
        items, ContextBudget(keep_recent_tool_results=2)
    )
    assert len(projected) == len(items)
    outputs = {i.call_id: i.output for i in projected if isinstance(i, ToolOutput)}
    for k in (1, 2, 3):
        assert outputs[f"call-{k}"] == f"[tool result cleared: read(call-{k})]"
    assert outputs["call-4"].startswith("payload-4-")
    assert outputs["call-5"].startswith("payload-5-")
    assert report.notes == ("tier1 microcompact: cleared 3 old tool result(s), kept recent 2",)
    assert items == before and all(a is b for a, b in zip(items, before, strict=True))
    first = items[2]
    assert isinstance(first, ToolOutput) and first.output.startswith("payload-1-")


def test_tier1_tool_names() -> None:
    items: list[Item] = [
        out("orphan-call"),
        calls("call-1", name="write"),
        out("call-1"),
        out("call-2", name="grep"),
        out("call-3"),
    ]
    projected, _ = TypeAwareContextProjector().project(
        items, ContextBudget(keep_recent_tool_results=1)
    )
    cleared = [i.output for i in projected if isinstance(i, ToolOutput)]
    assert cleared == [
        "[tool result cleared: orphan-call]",
        "[tool result cleared: write(call-1)]",
        "[tool result cleared: grep(call-2)]",
        "payload",
    ]


def test_tier1_fits_more_items_in_a_char_budget() -> None:
    items = tool_rounds(5, payload_chars=200)
    budget = ContextBudget(max_approx_chars=600)
    default_items, _ = DefaultContextProjector().project(items, budget)
    tiered, report = TypeAwareContextProjector().project(
        items, budget.model_copy(update={"keep_recent_tool_results": 1})
    )
    assert len(tiered) > len(default_items)
    assert report.notes[0].startswith("tier1 microcompact")
    assert report.notes[-1] == "maxApproxChars applied: 600"


def test_tier2_clears_reasoning_of_earlier_turns_only() -> None:
    items: list[Item] = [
        UserMessage(content="first"),
        Reasoning(text="old thoughts"),
        AssistantMessage(content="a1"),
        UserMessage(content="second"),
        Reasoning(text="current thoughts"),
    ]
    projected, report = TypeAwareContextProjector().project(
        items, ContextBudget(trim_old_reasoning=True)
    )
    assert projected[1] == Reasoning(text="[reasoning cleared]")
    assert projected[4] == Reasoning(text="current thoughts")
    assert report.notes == ("tier2 reasoning-trim: cleared 1 reasoning item(s)",)
    assert items[1] == Reasoning(text="old thoughts")
    off, off_report = TypeAwareContextProjector().project(items, ContextBudget())
    assert off == tuple(items) and off_report.notes == ()
    no_user: list[Item] = [Reasoning(text="t"), AssistantMessage(content="a")]
    kept, _ = TypeAwareContextProjector().project(no_user, ContextBudget(trim_old_reasoning=True))
    assert kept == tuple(no_user)


def test_without_tiers_type_aware_equals_default() -> None:
    items = tool_rounds(4, payload_chars=50)
    budgets = [
        ContextBudget(),
        ContextBudget(max_items=3),
        ContextBudget(max_items=5, pinned_prefix_items=1),
        ContextBudget(max_approx_chars=400),
        ContextBudget(max_items=6, max_approx_chars=300, pinned_prefix_items=2),
    ]
    for budget in budgets:
        expected = DefaultContextProjector().project(items, budget)
        assert TypeAwareContextProjector().project(items, budget) == expected


def test_projection_is_a_named_tuple() -> None:
    result = TypeAwareContextProjector().project([], ContextBudget(max_items=1))
    assert isinstance(result, Projection) and result.items == () and result.report.notes == ()


# --- properties -------------------------------------------------------------------------------


@st.composite
def tool_conversations(draw: st.DrawFn) -> list[Item]:
    items: list[Item] = []
    for turn in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "reasoning", "tools"]))
        if kind == "user":
            items.append(UserMessage(content=f"u{turn}" * draw(st.integers(1, 30))))
        elif kind == "assistant":
            items.append(AssistantMessage(content=f"a{turn}"))
        elif kind == "reasoning":
            items.append(Reasoning(text=f"r{turn}"))
        else:
            ids = [f"t{turn}-{k}" for k in range(draw(st.integers(1, 3)))]
            items.append(calls(*ids))
            items.extend(out(i, "o" * draw(st.integers(0, 80))) for i in ids)
    return items


budgets = st.builds(
    ContextBudget,
    max_items=st.none() | st.integers(0, 12),
    max_approx_chars=st.none() | st.integers(0, 2000),
    pinned_prefix_items=st.integers(0, 3),
    keep_recent_tool_results=st.none() | st.integers(0, 4),
    trim_old_reasoning=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(items=tool_conversations(), budget=budgets)
def test_projection_properties(items: list[Item], budget: ContextBudget) -> None:
    before = list(items)
    projected, report = TypeAwareContextProjector().project(items, budget)
    assert items == before and all(a is b for a, b in zip(items, before, strict=True))
    assert report.projected_item_count == len(projected)
    assert report.dropped_item_count == len(items) - len(projected)
    if budget.max_items is not None:
        assert len(projected) <= budget.max_items
    call_ids = {c.id for i in projected if isinstance(i, ToolCallsMessage) for c in i.tool_calls}
    output_ids = {i.call_id for i in projected if isinstance(i, ToolOutput)}
    assert call_ids == output_ids  # every kept call has its output and the reverse
    working: tuple[Item, ...] = tuple(items)
    if budget.keep_recent_tool_results is not None:
        working, _ = clear_old_tool_results(working, budget.keep_recent_tool_results)
    if budget.trim_old_reasoning:
        working, _ = trim_old_reasoning(working)
    remaining = iter(working)  # projected is a subsequence of the tiered items
    assert all(any(item == candidate for candidate in remaining) for item in projected)
