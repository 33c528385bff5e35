"""Tether's session runtime: agents, sessions, memory, events, stores and streams.

No Celery here: everything in this package runs in one process as a plain library. The names
below are the stable public API; backends live in ``tether.persistence.stores``,
``tether.persistence.archives``,
``tether.persistence.streams`` and ``tether.runs.leases``.
"""

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
from tether.runtime.agent import Agent, AgentOptions
from tether.runtime.registry import AgentRegistry
from tether.runtime.session import AgentSession
from tether.runtime.tools import Tool, ToolRegistry, Waiting, tool

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
