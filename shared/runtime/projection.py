"""Context projection: what one model request sees of memory, as pure functions over items.

Projection changes only the prompt, never memory. Inputs are never mutated (items are frozen, and
every pass builds new tuples); trimmed items are fresh copies, so full tool results and reasoning
stay in memory for compaction, audit and replay.

:class:`DefaultContextProjector` applies the item and character limits of a
:class:`~tether.core.context.ContextBudget`. :class:`TypeAwareContextProjector` first clears old
tool
results (tier 1) and old reasoning (tier 2), then applies the default projector.

Unlike the reference, the default projector also keeps tool calls paired: when a limit keeps a
tool-calls message but drops one of its outputs (or the reverse), the survivor is dropped too,
because chat APIs reject a tool output without its call and a call without its outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from tether.core.context import ContextBudget, ContextReport
from tether.core.items import (
    Item,
    Reasoning,
    ToolCallsMessage,
    ToolOutput,
    UserMessage,
    approx_chars,
)

CHARS_PER_TOKEN = 4
"""Rough characters per token, used to turn approximate sizes into token estimates."""

REASONING_CLEARED = "[reasoning cleared]"


def approx_tokens(items: Sequence[Item]) -> int:
    """Estimated tokens of ``items``: JSON size over :data:`CHARS_PER_TOKEN`, rounded up."""
    total_chars = sum(approx_chars(item) for item in items)
    return -(-total_chars // CHARS_PER_TOKEN)


class Projection(NamedTuple):
    """The items a request shows the model, and the report of what was cut."""

    items: tuple[Item, ...]
    report: ContextReport


@runtime_checkable
class ContextProjector(Protocol):
    """Chooses the items of one model request from memory items."""

    def project(self, items: Sequence[Item], budget: ContextBudget) -> Projection:
        """Project ``items`` under ``budget``; never mutates ``items``."""


class DefaultContextProjector:
    """Item limit, then character limit (reference §4.3), then tool-pair repair.

    Args:
        keep_tool_pairs: drop a tool-calls message whose outputs were cut, and tool outputs whose
            call was cut, so the prompt stays well formed. Pairs already broken in the source are
            left alone (projection does not repair memory).
    """

    def __init__(self, *, keep_tool_pairs: bool = True) -> None:
        self._keep_tool_pairs = keep_tool_pairs

    def project(self, items: Sequence[Item], budget: ContextBudget) -> Projection:
        """Project ``items`` under ``budget``; see the class docstring for the rules."""
        source = tuple(items)
        sizes = [approx_chars(item) for item in source]
        kept = list(range(len(source)))
        notes: list[str] = []
        item_limit_applied = False
        char_limit_applied = False
        if budget.max_items is not None:
            limited = _item_limit(kept, budget.max_items, budget.pinned_prefix_items)
            item_limit_applied = len(limited) < len(kept)
            if item_limit_applied:
                notes.append(f"maxItems applied: {budget.max_items}")
            kept = limited
        if budget.max_approx_chars is not None:
            limited = _char_limit(kept, sizes, budget.max_approx_chars, budget.pinned_prefix_items)
            char_limit_applied = _total(limited, sizes) < _total(kept, sizes)
            if char_limit_applied:
                notes.append(f"maxApproxChars applied: {budget.max_approx_chars}")
            kept = limited
        if self._keep_tool_pairs and len(kept) < len(source):
            repaired = _repair_tool_pairs(source, kept)
            if len(repaired) < len(kept):
                notes.append(
                    f"tool-pair repair: dropped {len(kept) - len(repaired)} item(s) "
                    "whose call or output was cut"
                )
            kept = repaired
        report = ContextReport(
            source_item_count=len(source),
            projected_item_count=len(kept),
            dropped_item_count=max(0, len(source) - len(kept)),
            source_approx_chars=sum(sizes),
            projected_approx_chars=_total(kept, sizes),
            item_limit_applied=item_limit_applied,
            character_limit_applied=char_limit_applied,
            notes=tuple(notes),
        )
        return Projection(tuple(source[i] for i in kept), report)


class TypeAwareContextProjector:
    """Tier 1 (clear old tool results) and tier 2 (clear old reasoning), then the default.

    With ``keep_recent_tool_results`` unset and ``trim_old_reasoning`` false the result equals the
    fallback projector's. Tier notes come before the fallback's notes.

    Args:
        fallback: the projector applied after the tiers (default: :class:`DefaultContextProjector`).
    """

    def __init__(self, fallback: ContextProjector | None = None) -> None:
        self._fallback: ContextProjector = fallback or DefaultContextProjector()

    def project(self, items: Sequence[Item], budget: ContextBudget) -> Projection:
        """Project ``items`` under ``budget``; never mutates ``items``."""
        working = tuple(items)
        notes: list[str] = []
        keep = budget.keep_recent_tool_results
        if keep is not None:
            working, cleared = clear_old_tool_results(working, keep)
            if cleared:
                notes.append(
                    f"tier1 microcompact: cleared {cleared} old tool result(s), kept recent {keep}"
                )
        if budget.trim_old_reasoning:
            working, trimmed = trim_old_reasoning(working)
            if trimmed:
                notes.append(f"tier2 reasoning-trim: cleared {trimmed} reasoning item(s)")
        projection = self._fallback.project(working, budget)
        if not notes:
            return projection
        report = projection.report.model_copy(update={"notes": (*notes, *projection.report.notes)})
        return Projection(projection.items, report)


def clear_old_tool_results(items: Sequence[Item], keep: int) -> tuple[tuple[Item, ...], int]:
    """Replace the output of all but the newest ``keep`` tool outputs with a placeholder.

    Returns:
        The new items and how many outputs were cleared.
    """
    source = tuple(items)
    positions = [i for i, item in enumerate(source) if isinstance(item, ToolOutput)]
    to_clear = positions[: max(0, len(positions) - keep)]
    if not to_clear:
        return source, 0
    names = tool_names_by_call_id(source)
    out = list(source)
    for index in to_clear:
        item = source[index]
        assert isinstance(item, ToolOutput)  # positions holds tool outputs only
        name = item.name or names.get(item.call_id)
        label = f"{name}({item.call_id})" if name else item.call_id
        out[index] = item.model_copy(update={"output": f"[tool result cleared: {label}]"})
    return tuple(out), len(to_clear)


def trim_old_reasoning(items: Sequence[Item]) -> tuple[tuple[Item, ...], int]:
    """Blank the reasoning items that come before the last user message.

    The current turn's reasoning is kept because the model may still be mid-chain on it. With no
    user message at all every item belongs to the current turn, so nothing is trimmed (the
    reference trims everything in that case).

    Returns:
        The new items and how many reasoning items were cleared.
    """
    source = tuple(items)
    last_user = max((i for i, it in enumerate(source) if isinstance(it, UserMessage)), default=0)
    out = list(source)
    trimmed = 0
    for index in range(last_user):
        item = source[index]
        if isinstance(item, Reasoning):
            out[index] = item.model_copy(update={"text": REASONING_CLEARED})
            trimmed += 1
    return tuple(out), trimmed


def tool_names_by_call_id(items: Sequence[Item]) -> dict[str, str]:
    """Map each tool call id to its tool name, from the tool-calls messages in ``items``."""
    names: dict[str, str] = {}
    for item in items:
        if isinstance(item, ToolCallsMessage):
            for call in item.tool_calls:
                names[call.id] = call.name
    return names


def _total(indices: Sequence[int], sizes: Sequence[int]) -> int:
    return sum(sizes[i] for i in indices)


def _item_limit(indices: list[int], max_items: int, pinned: int) -> list[int]:
    """Keep the first ``min(pinned, max_items)`` plus the newest rest, up to ``max_items``."""
    if len(indices) <= max_items:
        return list(indices)
    prefix_count = min(pinned, max_items)
    tail_start = max(prefix_count, len(indices) - (max_items - prefix_count))
    return indices[:prefix_count] + indices[tail_start:]


def _char_limit(indices: list[int], sizes: Sequence[int], max_chars: int, pinned: int) -> list[int]:
    """Keep pinned items while they fit (at least one), then the newest items that still fit.

    At least one tail item is always kept, even when it alone exceeds the limit, so the newest
    input always reaches the model.
    """
    if _total(indices, sizes) <= max_chars:
        return list(indices)
    if max_chars == 0:
        return []
    prefix_count = min(pinned, len(indices))
    prefix: list[int] = []
    used = 0
    for index in indices[:prefix_count]:
        if used + sizes[index] <= max_chars or not prefix:
            prefix.append(index)
            used += sizes[index]
    tail: list[int] = []
    for index in reversed(indices[prefix_count:]):
        if used + sizes[index] <= max_chars or not tail:
            tail.append(index)
            used += sizes[index]
    return prefix + tail[::-1]


def _repair_tool_pairs(source: Sequence[Item], kept: list[int]) -> list[int]:
    """Drop kept items whose tool-call partner existed in ``source`` but was not kept."""
    kept_set = set(kept)
    owner_by_call: dict[str, int] = {}
    outputs_by_call: dict[str, list[int]] = {}
    for index, item in enumerate(source):
        if isinstance(item, ToolCallsMessage):
            for call in item.tool_calls:
                owner_by_call[call.id] = index
        elif isinstance(item, ToolOutput):
            outputs_by_call.setdefault(item.call_id, []).append(index)
    drop: set[int] = set()
    for call_id, owner in owner_by_call.items():
        outputs = outputs_by_call.get(call_id, [])
        if owner in kept_set and any(o not in kept_set for o in outputs):
            drop.add(owner)
    for call_id, outputs in outputs_by_call.items():
        owner_index = owner_by_call.get(call_id)
        if owner_index is not None and (owner_index not in kept_set or owner_index in drop):
            drop.update(o for o in outputs if o in kept_set)
    return [i for i in kept if i not in drop]
