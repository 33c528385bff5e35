"""Tether's session runtime: agents, sessions, memory, events, stores and streams.

No Celery here: everything in this package runs in one process as a plain library. The names
below are the stable public API; backends live in ``shared.stores``, ``shared.archives``,
``shared.streams`` and ``shared.leases``.
"""

from shared.agent import Agent, AgentOptions
from shared.context import CompactResult, ContextBudget, ContextReport
from shared.events import AgentEvent, EventType, Usage
from shared.fold import project_events
from shared.items import (
    AssistantMessage,
    Item,
    Reasoning,
    ToolCall,
    ToolCallsMessage,
    ToolOutput,
    UserMessage,
)
from shared.memory import InMemoryMemory, Memory, MemorySnapshot
from shared.model import ModelClient, ModelRequest, ModelResponse, ToolSpec
from shared.models.scripted import ScriptedModel
from shared.reader import SessionLogReader, VerifyReport
from shared.registry import AgentRegistry
from shared.results import AgentResult, RunStatus
from shared.session import AgentSession
from shared.snapshot import RunRecord, SessionMetadata, SessionSnapshot
from shared.tools import Tool, ToolRegistry, Waiting, tool

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
