"""A real MCP server built with the ``mcp`` SDK, for the tests and the P19 benchmark: run as
``python tests/support/mcp_server.py [stdio | http PORT]``.

Its tools misbehave on request, each the way a real server can:

- ``add``: the well-behaved tool; ``whoami``: what credentials reached it (env, header);
- ``count NAME``: records the call's idempotency key (the request's ``_meta``) and answers how
  many calls carried it; ``block_once NAME`` records it too, then on a key's first call waits
  (up to an hour) until the file ``release`` exists, and answers at once on a later call;
- ``crash``: the process exits in the middle of the call; ``exit_soon``: it answers, then exits
  (between two calls); ``freeze``: the process stops
  (SIGSTOP) in the middle of the call, so nothing of it answers any more;
- ``hang SECONDS``: the call waits (the server stays responsive);
- ``huge MEGABYTES``: answers that many megabytes of text;
- ``fail REASON``: the tool raises (an ``isError`` result);
- ``grow``: adds the tool ``grown`` and says the list changed (both ways the protocol can);
- ``later``: answers with ``_meta`` ``tether/waiting`` (the output comes later).

``TETHER_TEST_MCP_DIR`` names the directory of its records: ``starts.log`` (a line per process
start: a stdio connection), ``calls.log`` (a line per ``count``/``block_once`` call: the key).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import anyio
import mcp_types
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

KEY = "tether/idempotency-key"
DIR = Path(os.environ.get("TETHER_TEST_MCP_DIR", "."))

# its log: only what would stop it (a failing tool is the point here, not news)
server = MCPServer("tether-test", log_level="CRITICAL")


def _record(name: str, line: str) -> None:
    # one write of a short line with O_APPEND: whole lines, even from several processes
    fd = os.open(DIR / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _key(ctx: Context) -> str:
    meta = ctx.request_context.meta or {}
    return str(meta.get(KEY, "no-key"))


def _seen(key: str) -> int:
    path = DIR / "calls.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return sum(1 for line in lines if line.split(" ", 1)[-1] == key)


@server.tool()
async def add(a: int, b: int) -> int:  # async: the SDK runs a sync tool in a worker thread
    """Add two integers."""
    return a + b


@server.tool()
def whoami(ctx: Context) -> str:
    """The credentials that reached the server."""
    headers = ctx.headers or {}
    return f"token={os.environ.get('TEST_TOKEN', '')} auth={headers.get('authorization', '')}"


@server.tool()
def count(name: str, ctx: Context) -> str:
    """Count the calls that carried this call's idempotency key."""
    key = _key(ctx)
    _record("calls.log", f"{name} {key}")
    return f"{name}: call {_seen(key)} with key {key}"


@server.tool()
async def block_once(name: str, ctx: Context) -> str:
    """On a key's first call wait for the file ``release``; later calls answer at once."""
    key = _key(ctx)
    _record("calls.log", f"{name} {key}")
    seen = _seen(key)
    if seen == 1:
        deadline = time.monotonic() + 3600
        while not (DIR / "release").exists() and time.monotonic() < deadline:
            await anyio.sleep(0.05)
    return f"{name}: done on call {seen}"


@server.tool()
def crash() -> str:
    """Exit the process in the middle of the call."""
    os._exit(3)


@server.tool()
def exit_soon() -> str:
    """Answer, then exit (between two calls: no call of the client is cut off)."""
    threading.Timer(0.2, os._exit, args=(4,)).start()
    return "bye"


@server.tool()
def freeze() -> str:
    """Stop the whole process (SIGSTOP) in the middle of the call."""
    os.kill(os.getpid(), signal.SIGSTOP)
    return "thawed"


@server.tool()
async def hang(seconds: float = 3600) -> str:
    """Wait ``seconds`` before answering (the server stays responsive)."""
    await anyio.sleep(seconds)
    return "woke"


@server.tool()
def huge(megabytes: int = 10) -> str:
    """Answer ``megabytes`` MB of text."""
    return "x" * (megabytes * 1_000_000)


@server.tool()
def fail(reason: str) -> str:
    """Raise: the call's result is an error."""
    raise ToolError(reason)


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool ``grown`` and tell the client the list changed."""
    server.add_tool(lambda: "I am new", name="grown", description="A tool added by grow.")
    await ctx.notify_tools_changed()  # subscribers of 2026-07-28 connections
    if ctx.protocol_version in mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS:
        await ctx.session.send_tool_list_changed()  # earlier protocol versions
    return "grown"


@server.tool()
def later() -> mcp_types.CallToolResult:
    """Answer that the output comes later."""
    content = [mcp_types.TextContent(type="text", text="accepted; the output comes later")]
    return mcp_types.CallToolResult(content=content, _meta={"tether/waiting": True})


def main(argv: list[str]) -> None:
    _record("starts.log", str(os.getpid()))
    if argv[:1] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
