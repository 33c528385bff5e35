"""Why an MCP call failed. Each becomes a ``TOOL_ERROR`` result the model sees (its class name
is the ``errorType``), never a failed run: these classes only travel from the connection to the
tool adapter (:mod:`tether.integrations.mcp.toolset`)."""

from __future__ import annotations

from tether.errors import AgentError


class McpCallError(AgentError):
    """An MCP call did not give a usable result."""


class McpUnavailable(McpCallError):
    """The server could not be started or reached (or is waiting out its restart backoff); the
    call was never sent."""


class McpTimeout(McpCallError):
    """The server did not answer within the call's limit; the call was cancelled."""


class McpConnectionLost(McpCallError):
    """The connection ended during the call (the server crashed or closed it): the call may or
    may not have taken effect on the server; the next call restarts the connection."""


class McpServerError(McpCallError):
    """The server answered the call with a protocol error (an unknown tool, bad parameters)."""


class McpMalformedResult(McpCallError):
    """The server's answer did not fit the protocol's result shape."""


class McpNotAllowed(McpCallError):
    """The run's tenant may not use this server (``TETHER_MCP_TENANTS``); nothing was sent."""
