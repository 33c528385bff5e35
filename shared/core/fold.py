"""The event contract: folding a session's events reproduces its memory.

Fold rules (one per memory-writing event type; every other event is ignored):

- ``USER_INPUT`` appends the user message;
- ``MEMORY_ITEMS_APPENDED`` appends its items;
- ``TOOL_RESULT`` appends the tool output;
- ``TOOL_OUTPUT_REPLACED`` patches the first tool output with the matching call id;
- ``MEMORY_ITEMS_REMOVED`` removes the last ``count`` items (all of them when fewer are left);
- ``MEMORY_COMPRESS`` with a compact result resets memory to the result's memory (a projection
  report changes nothing);
- ``SESSION_RESTORED`` resets memory to its baseline (a by-reference restore names the committed
  state the fold already holds, and changes nothing).

``SESSION_FORKED`` only names a fork's origin: it changes nothing.

The live session applies its writes through :func:`apply_event` too, so the running memory and the
fold share one definition of what each event means.
"""

from __future__ import annotations

from collections.abc import Iterable

from tether.core.events import (
    AgentEvent,
    CompactPayload,
    ItemsAppendedPayload,
    ItemsRemovedPayload,
    RestoredPayload,
    ToolOutputReplacedPayload,
    ToolResultPayload,
    UserInputPayload,
)
from tether.core.memory import InMemoryMemory, Memory, MemorySnapshot


def apply_event(memory: Memory, event: AgentEvent) -> bool:
    """Apply one event's memory effect; return True when the event writes memory."""
    payload = event.payload
    if isinstance(payload, UserInputPayload):
        memory.append((payload.item,))
    elif isinstance(payload, ItemsAppendedPayload):
        memory.append(payload.items)
    elif isinstance(payload, ToolResultPayload):
        memory.append((payload.item,))
    elif isinstance(payload, ToolOutputReplacedPayload):
        memory.replace_tool_output(payload.call_id, payload.output)
    elif isinstance(payload, ItemsRemovedPayload):
        current = memory.snapshot()
        # through reset, so every Memory implementation supports it without a new method
        keep = max(0, len(current.items) - payload.count)
        memory.reset(MemorySnapshot(items=current.items[:keep], summary=current.summary))
    elif isinstance(payload, CompactPayload):
        memory.reset(payload.result.memory)
    elif isinstance(payload, RestoredPayload) and payload.memory is not None:
        memory.reset(payload.memory)
    else:
        return False
    return True


def project_events(events: Iterable[AgentEvent]) -> MemorySnapshot:
    """Fold events, in order, into the memory snapshot they describe."""
    memory = InMemoryMemory()
    for event in events:
        apply_event(memory, event)
    return memory.snapshot()
