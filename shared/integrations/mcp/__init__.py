"""Tools from MCP servers for Tether's agents, through the official ``mcp`` SDK
(``pip install 'tether[mcp]'``); see docs/mcp.md.

- :class:`McpServer`: a server as declared (a command line, a URL, or a name from
  ``TETHER_MCP_SERVERS``);
- :class:`McpToolset` (or :func:`mcp_tools`): its tools, for an agent's ``tools=[...]``;
- :func:`process_pool`, :func:`close_process_pool`: the process's connections (one per server);
  a worker closes them on warm shutdown.

Importing this package imports nothing of the SDK; its modules do, when used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.integrations.mcp.connection import IDEMPOTENCY_META_KEY
    from tether.integrations.mcp.pool import McpPool, close_process_pool, process_pool
    from tether.integrations.mcp.servers import McpServer
    from tether.integrations.mcp.toolset import McpTool, McpToolset, mcp_tools

_EXPORTS: dict[str, str] = {
    "IDEMPOTENCY_META_KEY": "tether.integrations.mcp.connection",
    "McpPool": "tether.integrations.mcp.pool",
    "McpServer": "tether.integrations.mcp.servers",
    "McpTool": "tether.integrations.mcp.toolset",
    "McpToolset": "tether.integrations.mcp.toolset",
    "close_process_pool": "tether.integrations.mcp.pool",
    "mcp_tools": "tether.integrations.mcp.toolset",
    "process_pool": "tether.integrations.mcp.pool",
}
__all__ = [
    "IDEMPOTENCY_META_KEY",
    "McpPool",
    "McpServer",
    "McpTool",
    "McpToolset",
    "close_process_pool",
    "mcp_tools",
    "process_pool",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tether.integrations.mcp' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
