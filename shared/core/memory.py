"""Session memory: ordered items plus a summary string.

:class:`Memory` is the seam (a session gets a fresh instance from the agent's memory factory);
:class:`InMemoryMemory` is the default. Memory is only ever written through the session, which
emits exactly one event per write (see :mod:`tether.core.fold`).
"""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from tether.core.items import Item, ToolOutput


class MemorySnapshot(BaseModel):
    """An immutable value of memory: items in order, and the compacted-history summary."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: tuple[Item, ...] = ()
    summary: str | None = None


@runtime_checkable
class Memory(Protocol):
    """The memory seam. Implementations must be safe to call from one run at a time."""

    def append(self, items: tuple[Item, ...]) -> None:
        """Append items in order."""

    def replace_tool_output(self, call_id: str, output: str) -> bool:
        """Patch the output of the first tool output with ``call_id``; False when none matches."""

    def reset(self, snapshot: MemorySnapshot) -> None:
        """Replace items and summary with the snapshot's."""

    def snapshot(self) -> MemorySnapshot:
        """The current value (immutable, so it is also a defensive copy)."""


class InMemoryMemory:
    """Default memory: a Python list guarded by a lock."""

    def __init__(self, snapshot: MemorySnapshot | None = None) -> None:
        self._lock = threading.Lock()
        self._items: list[Item] = list(snapshot.items) if snapshot else []
        self._summary: str | None = snapshot.summary if snapshot else None

    def append(self, items: tuple[Item, ...]) -> None:
        with self._lock:
            self._items.extend(items)

    def replace_tool_output(self, call_id: str, output: str) -> bool:
        with self._lock:
            for index, item in enumerate(self._items):
                if isinstance(item, ToolOutput) and item.call_id == call_id:
                    # the call is settled: it waits for nothing any more
                    self._items[index] = item.model_copy(
                        update={"output": output, "wait_for": None}
                    )
                    return True
            return False

    def reset(self, snapshot: MemorySnapshot) -> None:
        with self._lock:
            self._items = list(snapshot.items)
            self._summary = snapshot.summary

    def snapshot(self) -> MemorySnapshot:
        with self._lock:
            # model_construct: every item came in validated (events and snapshots are pydantic
            # models), and checking each one again at every snapshot cost more than the rest
            # of an Agents SDK append
            return MemorySnapshot.model_construct(items=tuple(self._items), summary=self._summary)
