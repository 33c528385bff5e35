"""Tether's session runtime: agents, sessions, memory, events, stores and streams.

The runtime, persistence and run protocol below ``tether`` import no Celery (an import-linter
contract): they run in one process as a plain library, and Celery is wired in only by the
subpackages ``tether.producer`` and ``tether.worker``. The names below are the stable public
API; backends live in ``tether.persistence.stores``, ``tether.persistence.archives``,
``tether.persistence.streams`` and ``tether.runs.leases``.

Names are imported on first use: every ``tether.*`` module import runs this file first, and the
eager imports cost ~0.45 s (pydantic models, redis-py through the session reader), which a
command such as ``tether --help`` that needs none of them would pay.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.core.context import CompactResult, ContextBudget, ContextReport
    from tether.core.events import AgentEvent, EventType, Usage
    from tether.core.fold import project_events
    from tether.core.items import (
        AssistantMessage,
        Item,
        Reasoning,
        ToolCall,
        ToolCallsMessage,
        ToolOutput,
        UserMessage,
    )
    from tether.core.memory import InMemoryMemory, Memory, MemorySnapshot
    from tether.core.results import AgentResult, RunStatus
    from tether.core.snapshot import RunRecord, SessionMetadata, SessionSnapshot
    from tether.models.base import ModelClient, ModelRequest, ModelResponse, ToolSpec
    from tether.models.scripted import ScriptedModel
    from tether.persistence.reader import SessionLogReader, VerifyReport
    from tether.runtime.agent import Agent
    from tether.runtime.options import AgentOptions
    from tether.runtime.registry import AgentRegistry
    from tether.runtime.session import AgentSession
    from tether.runtime.tools import Tool, ToolRegistry, Waiting, tool

#: Where each public name lives (the imports above, for the type checker, say the same).
_EXPORTS: dict[str, str] = {
    "CompactResult": "tether.core.context",
    "ContextBudget": "tether.core.context",
    "ContextReport": "tether.core.context",
    "AgentEvent": "tether.core.events",
    "EventType": "tether.core.events",
    "Usage": "tether.core.events",
    "project_events": "tether.core.fold",
    "AssistantMessage": "tether.core.items",
    "Item": "tether.core.items",
    "Reasoning": "tether.core.items",
    "ToolCall": "tether.core.items",
    "ToolCallsMessage": "tether.core.items",
    "ToolOutput": "tether.core.items",
    "UserMessage": "tether.core.items",
    "InMemoryMemory": "tether.core.memory",
    "Memory": "tether.core.memory",
    "MemorySnapshot": "tether.core.memory",
    "AgentResult": "tether.core.results",
    "RunStatus": "tether.core.results",
    "RunRecord": "tether.core.snapshot",
    "SessionMetadata": "tether.core.snapshot",
    "SessionSnapshot": "tether.core.snapshot",
    "ModelClient": "tether.models.base",
    "ModelRequest": "tether.models.base",
    "ModelResponse": "tether.models.base",
    "ToolSpec": "tether.models.base",
    "ScriptedModel": "tether.models.scripted",
    "SessionLogReader": "tether.persistence.reader",
    "VerifyReport": "tether.persistence.reader",
    "Agent": "tether.runtime.agent",
    "AgentOptions": "tether.runtime.options",
    "AgentRegistry": "tether.runtime.registry",
    "AgentSession": "tether.runtime.session",
    "Tool": "tether.runtime.tools",
    "ToolRegistry": "tether.runtime.tools",
    "Waiting": "tether.runtime.tools",
    "tool": "tether.runtime.tools",
}

__all__ = [
    "Agent",
    "AgentEvent",
    "AgentOptions",
    "AgentRegistry",
    "AgentResult",
    "AgentSession",
    "AssistantMessage",
    "CompactResult",
    "ContextBudget",
    "ContextReport",
    "EventType",
    "InMemoryMemory",
    "Item",
    "Memory",
    "MemorySnapshot",
    "ModelClient",
    "ModelRequest",
    "ModelResponse",
    "Reasoning",
    "RunRecord",
    "RunStatus",
    "ScriptedModel",
    "SessionLogReader",
    "SessionMetadata",
    "SessionSnapshot",
    "Tool",
    "ToolCall",
    "ToolCallsMessage",
    "ToolOutput",
    "ToolRegistry",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "VerifyReport",
    "Waiting",
    "project_events",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute, not this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
