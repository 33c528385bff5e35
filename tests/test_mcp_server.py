"""#49: ``tether mcp`` (stdio and streamable HTTP) driven by the ``mcp`` SDK's own ``Client``, on
the shared stack's workers (the demo ``approver`` agent): start a run, watch its events, approve
its waiting call, get its result; one tenant's runs only; read-only mode refuses the writing
tools; the HTTP transport refuses a request without the token."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from tests.support.stack import Stack, eventually, unique
from tether.dev.redis_server import free_port

CLI = [sys.executable, "-m", "tether.producer.ops.cli", "mcp"]
TOKEN = "mcp-test-token-" + "7" * 16


@asynccontextmanager
async def stdio_client(stack: Stack, *args: str) -> AsyncIterator[Any]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=CLI[0], args=[*CLI[1:], *args], env=stack.env)
    async with Client(params, read_timeout_seconds=120) as client:
        yield client


async def call(client: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    text = result.content[0].text
    return json.loads(text)  # type: ignore[no-any-return]


async def approve_flow(client: Any, producer_tenant: str) -> None:
    """Start, watch, approve, result: the issue's acceptance on one client."""
    names = {tool.name for tool in (await client.list_tools()).tools}
    assert {"start_run", "get_run", "tail_events", "approve", "list_sessions"} <= names
    sid = unique("mcp-bank")
    started = await call(client, "start_run", session_id=sid, input="transfer 5", agent="approver")
    waiting = await call(client, "get_run", run_id=started["run_id"], wait_s=60)
    assert waiting["status"] == "WAITING", waiting
    pending = waiting["pending"][0]
    assert pending["tool"] == "transfer" and pending["reason"] == "approval"
    watched = await call(client, "tail_events", session_id=sid, wait_s=0.5)
    types = [event["type"] for event in watched["events"]]
    assert "TOOL_CALL" in types and "TOOL_RESULT" in types and watched["last_seq"] > 0
    going_on = await call(
        client, "approve", session_id=sid, call_id=pending["call_id"], agent="approver"
    )
    done = await call(client, "get_run", run_id=going_on["run_id"], wait_s=60)
    assert done["status"] == "COMPLETED", done
    assert "5" in (done["output"] or "")
    later = await call(client, "tail_events", session_id=sid, after_seq=watched["last_seq"])
    assert any(e["type"] == "TOOL_OUTPUT_REPLACED" for e in later["events"])
    assert sid in (await call(client, "list_sessions"))["sessions"]


def test_a_client_starts_watches_approves_and_gets_a_result_over_stdio(live_stack: Stack) -> None:
    async def scenario() -> None:
        async with stdio_client(live_stack, "--tenant", "mcp-acme") as client:
            await approve_flow(client, "mcp-acme")

    asyncio.run(scenario())


def test_the_server_acts_for_its_tenant_only(live_stack: Stack) -> None:
    other = live_stack.producer.run_async(
        unique("other"), "hello", agent="echo", tenant="mcp-other"
    )
    assert other.result(timeout=60).status == "COMPLETED"

    async def scenario() -> None:
        async with stdio_client(live_stack, "--tenant", "mcp-acme") as client:
            result = await client.call_tool("get_run", {"run_id": other.run_id})
            assert result.is_error and "no run" in result.content[0].text
            cancel = await call(client, "cancel_run", run_id=other.run_id)
            assert cancel["outcome"] == "unknown"  # another tenant's run: nothing changes
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert "tenant" not in json.dumps(tools["start_run"].input_schema)

    asyncio.run(scenario())


def test_read_only_mode_refuses_the_writing_tools(live_stack: Stack) -> None:
    ran = live_stack.producer.run(unique("ro"), "hi", agent="echo", tenant="mcp-ro", wait_s=60)

    async def scenario() -> None:
        async with stdio_client(live_stack, "--tenant", "mcp-ro", "--read-only") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert names == {"get_run", "tail_events", "list_sessions"}
            for tool in ("start_run", "approve", "cancel_run"):
                refused = await client.call_tool(tool, {"run_id": "r", "session_id": "s"})
                assert refused.is_error and "read-only" in refused.content[0].text
            assert (await call(client, "get_run", run_id=ran.run_id))["output"] == "echo: hi"

    asyncio.run(scenario())


@pytest.fixture
def http_server(live_stack: Stack) -> Iterator[str]:
    port = free_port()
    env = dict(live_stack.env, TETHER_MCP_HTTP_TOKEN=TOKEN)
    proc = subprocess.Popen(
        [*CLI, "--transport", "http", "--port", str(port), "--tenant", "mcp-web"], env=env
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        eventually(lambda: _answers(url) or proc.poll() is not None, timeout_s=60)
        assert proc.poll() is None, "tether mcp --transport http exited"
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 401
    except httpx.HTTPError:
        return False


def test_a_client_drives_runs_over_streamable_http_with_the_token(http_server: str) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def scenario() -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
            Client(streamable_http_client(http_server, http_client=http)) as client,
        ):
            await approve_flow(client, "mcp-web")

    asyncio.run(scenario())
    assert httpx.post(http_server, json={}, timeout=10).status_code == 401
    wrong = {"Authorization": "Bearer " + "x" * 31}
    assert httpx.post(http_server, json={}, headers=wrong, timeout=10).status_code == 401


def test_http_without_a_token_does_not_start(live_stack: Stack) -> None:
    done = subprocess.run(
        [*CLI, "--transport", "http"], env=live_stack.env, capture_output=True, timeout=60
    )
    assert done.returncode != 0
    assert b"needs TETHER_MCP_HTTP_TOKEN" in done.stderr
