"""A hand-written MCP server of the 2025-11-25 protocol (JSON-RPC over stdio), for what the
SDK's own server never does: ``broken`` answers a result that does not fit the protocol (its
``content`` is not a list); ``grow`` adds the tool ``grown`` and says so with a spontaneous
``notifications/tools/list_changed``, as servers before 2026-07-28 do."""

from __future__ import annotations

import json
import sys

TOOLS = [
    {
        "name": "broken",
        "description": "Answers malformed results.",
        "inputSchema": {"type": "object"},
    },
    {"name": "grow", "description": "Adds the tool grown.", "inputSchema": {"type": "object"}},
]
GROWN = {"name": "grown", "description": "A tool added by grow.", "inputSchema": {"type": "object"}}


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text(value: str) -> dict[str, object]:
    return {"content": [{"type": "text", "text": value}]}


def call(name: object) -> object:
    if name == "broken":
        return {"content": "this should have been a list of content blocks"}
    if name == "grow":
        if GROWN not in TOOLS:
            TOOLS.append(GROWN)
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return text("grown")
    return text("I am new")


def answer(request: dict[str, object]) -> dict[str, object] | None:
    method, rid = request.get("method"), request.get("id")
    if rid is None:  # a notification
        return None
    if method == "initialize":
        result: object = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "legacy", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        params = request.get("params")
        result = call(params.get("name") if isinstance(params, dict) else None)
    else:
        error = {"code": -32601, "message": f"method not found: {method}"}
        return {"jsonrpc": "2.0", "id": rid, "error": error}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            reply = answer(json.loads(line))
            if reply is not None:
                send(reply)


if __name__ == "__main__":
    main()
