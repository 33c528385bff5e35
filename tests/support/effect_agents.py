"""An agent whose tool has a side effect deduplicated by its idempotency key (#29 item 2, N2);
loaded by workers through TETHER_AGENT_MODULES.

``effect <dir> <n>``: the model asks for ``n`` calls of ``effect`` in one step, each with a fresh
random call id (as a real model does when it is asked again), then ends. Every execution appends
its key to ``<dir>/executions``; an effect applies (a line in ``<dir>/applied``) only for a key
not seen before, as a tool with side effects should.
"""

from __future__ import annotations

import fcntl
import uuid
from pathlib import Path

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolCall, ToolOutput, UserMessage
from tether.models.base import ModelRequest
from tether.runtime.tools import ToolContext


@tool(name="effect", description="Apply a side effect once per idempotency key.")
def effect(directory: str, context: ToolContext) -> str:
    root, key = Path(directory), context.idempotency_key
    with (root / "executions").open("a") as executions:
        fcntl.flock(executions, fcntl.LOCK_EX)  # the lock of both files
        executions.write(key + "\n")
        applied = root / "applied"
        seen = applied.read_text().split() if applied.exists() else []
        if key not in seen:
            with applied.open("a") as out:
                out.write(key + "\n")
    return "done"


def _responder(request: ModelRequest) -> ModelResponse:
    if request.items and isinstance(request.items[-1], ToolOutput):
        return ModelResponse.final("effects done")
    text = next(i.content for i in reversed(request.items) if isinstance(i, UserMessage))
    _, directory, count = text.split()
    calls = [
        ToolCall(
            id=f"call_{uuid.uuid4().hex[:12]}",
            name="effect",
            arguments=f'{{"directory": "{directory}"}}',
        )
        for _ in range(int(count))
    ]
    return ModelResponse.calls(*calls)


def effects() -> Agent:
    """Asks for ``n`` side effects in one step."""
    return Agent(
        ScriptedModel(responder=_responder), "scripted-effects", tools=[effect], name="effects"
    )


TETHER_AGENTS = {"effects": effects}
