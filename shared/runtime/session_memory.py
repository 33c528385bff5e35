"""A session's memory verbs outside the agent loop: read the last items, add, pop, clear, patch
a tool output, compact; and a person's answers to its waiting calls (approve, reject, output).

Each write is exactly one event through :meth:`AgentSession.write`, so folding the log still
gives the memory (the event contract). Mixed into :class:`tether.runtime.session.AgentSession`
(kept apart so neither module grows past one job).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from tether.core.context import CompactResult
from tether.core.events import (
    AgentEvent,
    CompactPayload,
    EventType,
    ItemsAppendedPayload,
    ItemsRemovedPayload,
    Payload,
    ToolOutputReplacedPayload,
)
from tether.core.items import Item
from tether.core.memory import Memory
from tether.core.results import Resolution
from tether.errors import InvalidInput
from tether.runtime.llm_summary import record_summary_calls, summary_calls

if TYPE_CHECKING:
    import threading

    from tether.runtime.compaction import CompactPolicy


T = TypeVar("T")


def last_items(items: Sequence[T], limit: int | None) -> list[T]:
    """The last ``limit`` items in order (all with None).

    Raises:
        InvalidInput: ``limit`` is negative.
    """
    if limit is None:
        return list(items)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidInput(f"limit {limit!r} is not allowed; pass None (all items) or an int >= 0")
    # max(): a limit above the length is all of them, not a negative (wrapping) start
    return list(items[max(0, len(items) - limit) :]) if limit else []


class SessionMemoryOps:
    """Memory verbs of :class:`~tether.runtime.session.AgentSession` (a mixin)."""

    _memory: Memory
    _lock: threading.RLock
    _last_compact: CompactResult | None

    if TYPE_CHECKING:

        def write(
            self,
            type_: EventType,
            payload: Payload,
            *,
            run_id: str | None = None,
            step: int = 0,
            touch: bool = True,
        ) -> AgentEvent: ...

        def resolve(
            self,
            resolutions: Sequence[Resolution],
            *,
            run_id: str | None = None,
            request_id: str | None = None,
        ) -> None: ...

        def emit(
            self,
            type_: EventType,
            payload: Payload | None = None,
            *,
            run_id: str | None = None,
            step: int = 0,
        ) -> AgentEvent: ...

    def get_items(self, limit: int | None = None) -> list[Item]:
        """The last ``limit`` memory items, oldest first (every item with None).

        Raises:
            InvalidInput: ``limit`` is negative.
        """
        return last_items(self._memory.snapshot().items, limit)

    def add_items(self, items: Sequence[Item], *, run_id: str | None = None) -> AgentEvent | None:
        """Append ``items`` with one ``MEMORY_ITEMS_APPENDED`` event (none for no items)."""
        if not items:
            return None
        return self.write(
            EventType.MEMORY_ITEMS_APPENDED, ItemsAppendedPayload(items=tuple(items)), run_id=run_id
        )

    def pop_item(self, *, run_id: str | None = None) -> Item | None:
        """Remove and return the last memory item with one ``MEMORY_ITEMS_REMOVED`` event;
        None (and no event) when memory holds no item."""
        with self._lock:
            items = self._memory.snapshot().items
            if not items:
                return None
            self.write(EventType.MEMORY_ITEMS_REMOVED, ItemsRemovedPayload(count=1), run_id=run_id)
            return items[-1]

    def clear_items(self, *, run_id: str | None = None) -> int:
        """Remove every memory item with one ``MEMORY_ITEMS_REMOVED`` event (none when empty);
        the summary stays. Returns how many items were removed."""
        with self._lock:
            count = len(self._memory.snapshot().items)
            if count:
                self.write(
                    EventType.MEMORY_ITEMS_REMOVED, ItemsRemovedPayload(count=count), run_id=run_id
                )
            return count

    def replace_tool_output(self, call_id: str, output: str, *, run_id: str | None = None) -> bool:
        """Patch a tool output (e.g. a WAITING placeholder); False when no output has that id."""
        with self._lock:
            if not any(
                getattr(item, "call_id", None) == call_id for item in self._memory.snapshot().items
            ):
                return False
            self.write(
                EventType.TOOL_OUTPUT_REPLACED,
                ToolOutputReplacedPayload(call_id=call_id, output=output),
                run_id=run_id,
            )
            return True

    def compact(
        self, policy: CompactPolicy, *, run_id: str | None = None, step: int = 0
    ) -> CompactResult:
        """Compact memory with ``policy`` now; emits ``MEMORY_COMPRESS`` with the result, after
        a ``MODEL_USAGE`` event for each billed summary call the policy made (an
        :class:`~tether.runtime.compaction.LlmCompactPolicy`), also when it then failed."""
        with self._lock:
            with summary_calls() as calls:
                try:
                    result = policy.compact(self._memory.snapshot())
                finally:
                    record_summary_calls(self, calls, run_id=run_id, step=step)
            self.apply_compact(result, run_id=run_id, step=step)
            return result

    def apply_compact(
        self, result: CompactResult, *, run_id: str | None = None, step: int = 0
    ) -> None:
        """Install a compaction result (one ``MEMORY_COMPRESS`` event) and remember it."""
        with self._lock:
            self.write(
                EventType.MEMORY_COMPRESS, CompactPayload(result=result), run_id=run_id, step=step
            )
            self._last_compact = result

    def approve(self, call_id: str) -> None:
        """Run a call that waits for approval, and record its output."""
        self.resolve([Resolution(call_id=call_id, action="approve")])

    def reject(self, call_id: str, reason: str = "rejected by a person") -> None:
        """Refuse a call that waits for approval; the model sees ``reason``."""
        self.resolve([Resolution(call_id=call_id, action="reject", text=reason)])

    def submit_tool_output(self, call_id: str, output: str) -> None:
        """Give the output of a call that waits for one (a tool that returned ``Waiting``)."""
        self.resolve([Resolution(call_id=call_id, action="output", text=output)])
