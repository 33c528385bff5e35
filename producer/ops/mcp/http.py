"""``tether mcp --transport http``: the server's streamable-HTTP app behind a bearer token.

A streamable-HTTP endpoint is reachable by every process of the machine (and more, bound beyond
loopback), so it never runs open: each request must carry ``Authorization: Bearer
<TETHER_MCP_HTTP_TOKEN>`` (compared in constant time), else it is answered 401 and reaches
nothing. The SDK's own DNS-rebinding protection stays on for the bound host.
"""

from __future__ import annotations

import hmac
from typing import Any

from mcp.server import MCPServer

Scope = dict[str, Any]


class BearerToken:
    """An ASGI app letting through only requests that carry the token (lifespan passes)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
            if not hmac.compare_digest(given, self._expected):
                await _refuse(send)
                return
        await self.app(scope, receive, send)


async def _refuse(send: Any) -> None:
    body = b'{"error": "missing or wrong bearer token (TETHER_MCP_HTTP_TOKEN)"}'
    headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def serve_http(server: MCPServer, *, host: str, port: int, token: str) -> None:
    """Serve ``server`` at ``http://host:port/mcp`` until interrupted."""
    import anyio
    import uvicorn

    app = BearerToken(server.streamable_http_app(host=host), token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    anyio.run(uvicorn.Server(config).serve)
