"""``tether mcp``: Tether as an MCP server for one tenant, over stdio (an MCP client starts it)
or streamable HTTP (behind ``TETHER_MCP_HTTP_TOKEN``); see docs/mcp.md and
:mod:`tether.producer.ops.mcp.server`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tether.producer.ops.cli.support import TenantOption, cli_settings

if TYPE_CHECKING:
    from mcp.server import MCPServer


def register(app: typer.Typer) -> None:
    """Add ``tether mcp`` to ``app``."""
    app.command(name="mcp")(mcp)


def mcp(
    transport: Annotated[
        str, typer.Option("--transport", help="stdio (for a client that starts it) or http.")
    ] = "stdio",
    host: Annotated[str, typer.Option("--host", help="http: the address to bind.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=1, max=65535, help="http: the port to bind.")
    ] = 8765,
    tenant: TenantOption = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Offer only the tools that change nothing.")
    ] = False,
) -> None:
    """Serve this tenant's runs as MCP tools: start, watch, approve, answer, cancel."""
    from tether.errors import ConfigurationError, InvalidInput
    from tether.producer.client import Producer  # Celery: only when the command runs
    from tether.producer.ops.mcp.server import build_server

    if transport not in ("stdio", "http"):
        raise InvalidInput(f"--transport {transport!r} is not known; use stdio or http")
    settings = cli_settings()
    scope = tenant or settings.tenant
    token = settings.mcp_http_token
    if transport == "http" and token is None:
        raise ConfigurationError(
            "tether mcp --transport http needs TETHER_MCP_HTTP_TOKEN (at least 16 characters, "
            "e.g. `openssl rand -hex 24`): its clients send it as a bearer token"
        )
    with Producer(settings.model_copy(update={"tenant": scope})) as producer:
        server = build_server(producer, settings, scope, read_only=read_only)
        _serve(server, transport, host, port, token.get_secret_value() if token else "")


def _serve(server: MCPServer, transport: str, host: str, port: int, token: str) -> None:
    if transport == "stdio":
        server.run("stdio")
        return
    from tether.producer.ops.mcp.http import serve_http

    serve_http(server, host=host, port=port, token=token)
