"""Value types of compaction and context projection, shared by events, snapshots and policies.

The algorithms live in :mod:`tether.runtime.projection` and :mod:`tether.runtime.compaction`; these
types live
apart because events and snapshots persist them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tether.core.memory import MemorySnapshot


class ContextBudget(BaseModel):
    """Limits on what is sent to the model in one request.

    Attributes:
        max_items: keep at most this many items (None: no limit).
        max_approx_chars: keep items whose JSON sizes sum to at most this (None: no limit).
        pinned_prefix_items: the first N items are always kept.
        keep_recent_tool_results: only the newest N tool outputs keep their text (None: all).
        trim_old_reasoning: blank reasoning items before the last user message.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_items: int | None = Field(default=None, ge=0)
    max_approx_chars: int | None = Field(default=None, ge=0)
    pinned_prefix_items: int = Field(default=0, ge=0)
    keep_recent_tool_results: int | None = Field(default=None, ge=0)
    trim_old_reasoning: bool = False


class ContextReport(BaseModel):
    """What a projection did: counts, sizes, which limits applied, and notes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source_item_count: int = 0
    projected_item_count: int = 0
    dropped_item_count: int = 0
    source_approx_chars: int = 0
    projected_approx_chars: int = 0
    item_limit_applied: bool = False
    character_limit_applied: bool = False
    notes: tuple[str, ...] = ()


class CompactResult(BaseModel):
    """The outcome of a compaction: the new memory to install, and what was summarised."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory: MemorySnapshot
    summary: str | None = None
    context_report: ContextReport | None = None
    completed: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()
    failed_commands: tuple[str, ...] = ()
    test_results: tuple[str, ...] = ()
    open_questions: tuple[str, ...] = ()
    read_files: tuple[str, ...] = ()
    modified_files: tuple[str, ...] = ()
