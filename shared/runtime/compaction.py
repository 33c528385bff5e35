"""Compaction policies: rewrite memory into fewer items plus a summary (reference §4.1).

Policies are pure: ``compact`` reads a :class:`~tether.core.memory.MemorySnapshot` and returns a
:class:`~tether.core.context.CompactResult` whose ``memory`` the session installs (and records as
one
``MEMORY_COMPRESS`` event). Nothing here touches live memory or emits events.

- :class:`KeepLastPolicy`: keep the last N items, fixed summary (tests and simple agents).
- :class:`StructuredSummaryPolicy`: project with a budget and note what was dropped.
- :class:`LlmCompactPolicy`: summarise the older part with one model call (see
  :mod:`tether.runtime.llm_summary` for the prompt and parsing).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from tether.core.context import CompactResult, ContextBudget, ContextReport
from tether.core.items import Item, ToolCallsMessage, ToolOutput, UserMessage, approx_chars
from tether.core.memory import MemorySnapshot
from tether.errors import ConfigurationError
from tether.models.base import ModelClient
from tether.runtime.llm_summary import (
    ParsedSummary,
    extract_file_paths,
    parse_summary,
    render_summary,
    request_summary,
    unavailable_summary,
)
from tether.runtime.projection import ContextProjector, DefaultContextProjector

log = logging.getLogger(__name__)

SUMMARY_MARKER = "TETHER_COMPACT_SUMMARY"
TRUNCATED_NOTE = "[earlier summary truncated]\n"
"""First line of every summary written by :class:`StructuredSummaryPolicy`."""

AUTHORITATIVE_NOTE = (
    "Preserved recent items should be treated as the authoritative working context."
)


@runtime_checkable
class CompactPolicy(Protocol):
    """Decides when to compact and how."""

    def should_compact(self, snapshot: MemorySnapshot) -> bool:
        """True when ``snapshot`` is over the policy's threshold."""

    def compact(self, snapshot: MemorySnapshot) -> CompactResult:
        """The compacted memory and what was summarised; never mutates ``snapshot``."""


def _count_report(source: Sequence[Item], kept: Sequence[Item], note: str) -> ContextReport:
    return ContextReport(
        source_item_count=len(source),
        projected_item_count=len(kept),
        dropped_item_count=max(0, len(source) - len(kept)),
        source_approx_chars=sum(approx_chars(item) for item in source),
        projected_approx_chars=sum(approx_chars(item) for item in kept),
        item_limit_applied=len(kept) < len(source),
        notes=(note,),
    )


class KeepLastPolicy:
    """Keep the last ``keep`` items and set a fixed summary.

    Args:
        keep: items to keep (compaction fires when there are more).
        summary: the summary to install.
    """

    def __init__(self, keep: int, summary: str) -> None:
        if keep < 0:
            raise ConfigurationError(f"KeepLastPolicy keep={keep} is negative; use 0 or more")
        self.keep = keep
        self.summary = summary

    def should_compact(self, snapshot: MemorySnapshot) -> bool:
        """True when memory holds more than ``keep`` items."""
        return len(snapshot.items) > self.keep

    def compact(self, snapshot: MemorySnapshot) -> CompactResult:
        """Keep the newest ``keep`` items with the fixed summary."""
        kept = snapshot.items[len(snapshot.items) - min(self.keep, len(snapshot.items)) :]
        report = _count_report(snapshot.items, kept, f"keep-last: kept {len(kept)}")
        return CompactResult(
            memory=MemorySnapshot(items=kept, summary=self.summary),
            summary=self.summary,
            context_report=report,
        )


class StructuredSummaryPolicy:
    """Project memory with a budget, keep the projected items, and note what was dropped.

    Args:
        budget: the projection budget (its ``max_items``/``max_approx_chars`` are also the
            triggers).
        projector: the projector (default:
            :class:`~tether.runtime.projection.DefaultContextProjector`).
        trigger_items: fire above this many items instead of above ``budget.max_items``.
        max_summary_chars: keep at most this much of the previous summary (its newest part), so
            a session compacted a thousand times keeps a bounded summary.
    """

    def __init__(
        self,
        budget: ContextBudget,
        projector: ContextProjector | None = None,
        trigger_items: int | None = None,
        max_summary_chars: int = 4000,
    ) -> None:
        if trigger_items is not None and trigger_items < 0:
            raise ConfigurationError(
                f"StructuredSummaryPolicy trigger_items={trigger_items} is negative; use 0 or more"
            )
        self.budget = budget
        self.projector: ContextProjector = projector or DefaultContextProjector()
        self.trigger_items = trigger_items
        self.max_summary_chars = max_summary_chars

    def should_compact(self, snapshot: MemorySnapshot) -> bool:
        """True when items exceed the item trigger or their size exceeds ``max_approx_chars``."""
        limit = self.trigger_items if self.trigger_items is not None else self.budget.max_items
        if limit is not None and len(snapshot.items) > limit:
            return True
        max_chars = self.budget.max_approx_chars
        return max_chars is not None and sum(map(approx_chars, snapshot.items)) > max_chars

    def compact(self, snapshot: MemorySnapshot) -> CompactResult:
        """Keep the projected items; the summary records the previous one and the counts."""
        items, report = self.projector.project(snapshot.items, self.budget)
        lines = [SUMMARY_MARKER]
        previous = (snapshot.summary or "").strip()
        if len(previous) > self.max_summary_chars:
            previous = TRUNCATED_NOTE + previous[-self.max_summary_chars :]
        if previous:
            lines.append(f"Existing summary:\n{previous}")
        retained = f"{report.projected_item_count}/{report.source_item_count} items retained"
        lines.append(f"Context projection: {retained}, {report.dropped_item_count} dropped.")
        lines.append(AUTHORITATIVE_NOTE)
        summary = "\n".join(lines)
        return CompactResult(
            memory=MemorySnapshot(items=items, summary=summary),
            summary=summary,
            context_report=report,
        )


def _pair_splitting_cuts(items: Sequence[Item]) -> list[bool]:
    """For each cut 0..len(items): True when some tool call id appears on both sides of it.

    A call id first seen at ``f`` and last seen at ``l`` blocks the cuts ``f+1..l``; one sweep
    over a difference array keeps this linear in the number of items.
    """
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for index, item in enumerate(items):
        for call_id in _call_ids(item):
            first.setdefault(call_id, index)
            last[call_id] = index
    delta = [0] * (len(items) + 2)
    for call_id, start in first.items():
        if last[call_id] > start:
            delta[start + 1] += 1
            delta[last[call_id] + 1] -= 1
    blocked: list[bool] = []
    open_pairs = 0
    for cut in range(len(items) + 1):
        open_pairs += delta[cut]
        blocked.append(open_pairs > 0)
    return blocked


def _call_ids(item: Item) -> tuple[str, ...]:
    if isinstance(item, ToolCallsMessage):
        return tuple(call.id for call in item.tool_calls)
    if isinstance(item, ToolOutput):
        return (item.call_id,)
    return ()


def find_safe_cut(items: Sequence[Item], naive_cut: int) -> int:
    """Where to split ``items`` into summarised ``[0, cut)`` and kept ``[cut, end)``.

    Walks back from ``naive_cut`` to the nearest user message that does not separate a tool call
    from its output(s). When there is none, walks back to the nearest index that at least keeps
    tool pairs together (0 always does). The result is never above ``naive_cut``, so at least
    ``len(items) - naive_cut`` items are kept.
    """
    if naive_cut <= 0:
        return 0
    if naive_cut >= len(items):
        return len(items)
    splits = _pair_splitting_cuts(items)
    for cut in range(naive_cut, -1, -1):
        if isinstance(items[cut], UserMessage) and not splits[cut]:
            return cut
    for cut in range(naive_cut, -1, -1):
        if not splits[cut]:
            return cut
    return 0  # unreachable: a cut at 0 splits nothing


class LlmCompactPolicy:
    """Summarise older items with one model call and keep the newest ``max_items`` (or more).

    Args:
        model: the model client used for the summary.
        model_name: the model to ask.
        max_items: compaction fires above this many items; about this many recent items are kept
            (more when the cut walks back to a turn boundary).
    """

    def __init__(self, model: ModelClient, model_name: str, max_items: int) -> None:
        if max_items < 0:
            raise ConfigurationError(
                f"LlmCompactPolicy max_items={max_items} is negative; use 0 or more"
            )
        self.model = model
        self.model_name = model_name
        self.max_items = max_items

    def should_compact(self, snapshot: MemorySnapshot) -> bool:
        """True when memory holds more than ``max_items`` items."""
        return len(snapshot.items) > self.max_items

    def compact(self, snapshot: MemorySnapshot) -> CompactResult:
        """Summarise ``[0, cut)`` into the new summary and keep ``[cut, end)``."""
        items = snapshot.items
        naive_cut = len(items) - min(self.max_items, len(items))
        cut = find_safe_cut(items, naive_cut)
        old, kept = items[:cut], items[cut:]
        if not old:
            return CompactResult(memory=snapshot, summary=snapshot.summary)
        read_files, modified_files = extract_file_paths(old)
        parsed = self._summarise(old, snapshot.summary, read_files, modified_files)
        note = f"llm compaction: summarized {len(old)} item(s), kept {len(kept)}"
        return CompactResult(
            memory=MemorySnapshot(items=kept, summary=parsed.text),
            summary=parsed.text,
            context_report=_count_report(items, kept, note),
            completed=parsed.completed,
            pending=parsed.pending,
            decisions=parsed.decisions,
            failed_commands=parsed.errors,
            test_results=parsed.test_results,
            open_questions=parsed.open_questions,
            read_files=read_files,
            modified_files=modified_files,
        )

    def _summarise(
        self,
        old: Sequence[Item],
        previous: str | None,
        read_files: tuple[str, ...],
        modified_files: tuple[str, ...],
    ) -> ParsedSummary:
        try:
            raw = request_summary(
                self.model, self.model_name, old, previous, read_files, modified_files
            )
        except Exception as exc:  # any model failure degrades to a note; compaction proceeds
            log.warning("compaction summary failed: %s", type(exc).__name__)
            return ParsedSummary(text=unavailable_summary(len(old), previous))
        parsed = parse_summary(raw)
        rendered = render_summary(parsed, read_files, modified_files) if parsed else ""
        if parsed is None or not rendered:
            # Unparsable (or empty) JSON: the model's own text is still the best summary there is.
            return ParsedSummary(text=raw.strip() or unavailable_summary(len(old), previous))
        return parsed.with_text(rendered)
