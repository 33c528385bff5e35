"""Agents whose tools come from the test MCP server (:mod:`tests.support.mcp_server`), in-process
and on workers (``TETHER_AGENT_MODULES=tests.support.mcp_agents``, the server ``test`` in
``TETHER_MCP_SERVERS``: see :func:`servers_env`).

The scripted model reads the input ``TOOL {json arguments}``: it calls that tool once, then ends
with the tool's output (or its error) as the run's output. ``add+add`` calls ``add`` twice in one
step (parallel calls), then ends with both outputs. ``py-add`` is the same agent with ``add`` as a
Python tool (the P19 benchmark's baseline).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput, UserMessage
from tether.integrations.mcp import McpServer, McpToolset
from tether.models.base import ModelRequest
from tether.runtime.options import AgentOptions

SERVER_SCRIPT = Path(__file__).with_name("mcp_server.py")


def server_command() -> list[str]:
    """The test server's stdio command line."""
    return [sys.executable, str(SERVER_SCRIPT)]


def servers_env(records: Path, **limits: object) -> str:
    """A ``TETHER_MCP_SERVERS`` value naming the test server ``test`` (records in ``records``)."""
    config = {"command": server_command(), "env": {"TETHER_TEST_MCP_DIR": str(records)}}
    return json.dumps({"test": {**config, **limits}})


def respond(request: ModelRequest) -> ModelResponse:
    """Call the tool the input names; then answer with what the calls gave."""
    outputs = []
    for item in reversed(request.items):
        if not isinstance(item, ToolOutput):
            break
        outputs.append(item.output)
    if outputs:
        return ModelResponse.final(" | ".join(reversed(outputs)))
    text = next(i.content for i in reversed(request.items) if isinstance(i, UserMessage))
    name, _, arguments = text.partition(" ")
    names = name.split("+")
    calls = [
        (f"call_{len(request.items)}_{n}", tool, arguments or "{}") for n, tool in enumerate(names)
    ]
    from tether.core.items import ToolCall

    return ModelResponse.calls(*(ToolCall(id=i, name=t, arguments=a) for i, t, a in calls))


def mcp_agent(
    toolset: McpToolset, *, name: str = "mcp", options: AgentOptions | None = None
) -> Agent:
    """An agent whose tools are ``toolset``'s."""
    model = ScriptedModel(responder=respond, keep_requests=0)
    return Agent(model, "scripted-mcp", tools=[toolset], name=name, options=options)


def _worker_agent() -> Agent:
    return mcp_agent(McpToolset(McpServer.named("test")))


def _add_agent() -> Agent:
    """Only the server's ``add``: P19's MCP side, offering the model what ``py-add`` does."""
    return mcp_agent(McpToolset(McpServer.named("test"), include={"add"}), name="mcp-add")


def _approving_agent() -> Agent:
    options = AgentOptions(require_approval=frozenset({"count"}))
    return mcp_agent(McpToolset(McpServer.named("test")), name="mcp-approval", options=options)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def python_twin(*, name: str = "py-add") -> Agent:
    """The same scripted model with the server's ``add`` as a Python tool (P19's baseline)."""
    model = ScriptedModel(responder=respond, keep_requests=0)
    return Agent(model, "scripted-mcp", tools=[add], name=name)


def _remote_agent() -> Agent:
    return mcp_agent(McpToolset(McpServer.named("remote")), name="mcp-remote")


TETHER_AGENTS = {
    "mcp": _worker_agent,
    "mcp-add": _add_agent,
    "mcp-approval": _approving_agent,
    "mcp-remote": _remote_agent,
    "py-add": python_twin,
}
