"""#49: tools from real MCP server processes (the ``mcp`` SDK's, :mod:`tests.support.mcp_server`)
run by in-process agents: they reach the model with their schemas, each call carries its
idempotency key in ``_meta``, and every way a server fails (an error, a hang, 10 MB) is a tool
error the model sees, never a failed run.

Crashes, exits, freezes and failed starts (the pool restarting a server) are in
``tests/test_mcp_restarts.py``; the workers' variants (a SIGKILL during a call, pool reuse
across runs, warm shutdown) in ``tests/test_mcp_workers.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from tests.support.mcp_agents import mcp_agent, server_command, servers_env
from tests.support.stack import eventually
from tether.core.items import ToolCall
from tether.core.results import RunStatus
from tether.integrations.mcp import McpPool, McpServer, McpToolset
from tether.models.base import ModelRequest
from tether.runtime.options import AgentOptions
from tether.runtime.tools import ToolContext
from tether.settings import Settings


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp")


@pytest.fixture(scope="module")
def pool(records: Path) -> Iterator[McpPool]:
    """One pool for the module: the server ``test`` from the settings, started once."""
    settings = Settings(mcp_servers=servers_env(records, tool_timeouts_s={"hang": 1.0}))
    made = McpPool(settings)
    yield made
    made.close()


@pytest.fixture
def toolset(pool: McpPool) -> McpToolset:
    return McpToolset("test", pool=pool)


def own_pool(tmp_path: Path, **limits: object) -> McpPool:
    return McpPool(Settings(mcp_servers=servers_env(tmp_path, **limits)))


def run(toolset: McpToolset, text: str, **options: object) -> tuple[str, RunStatus, object]:
    agent = mcp_agent(toolset, options=AgentOptions(**options) if options else None)  # type: ignore[arg-type]
    session = agent.new_session(tenant="acme")
    result = session.run(text)
    return result.output or "", result.status, session


def test_the_servers_tools_reach_the_model_with_their_schemas(toolset: McpToolset) -> None:
    seen: list[ModelRequest] = []
    agent = mcp_agent(toolset)
    inner = agent.model.complete
    agent.model.complete = lambda request: seen.append(request) or inner(request)  # type: ignore[method-assign]
    result = agent.new_session(tenant="acme").run('add {"a": 2, "b": 3}')
    assert result.status is RunStatus.COMPLETED and result.output == "5"
    add = next(spec for spec in seen[0].tools if spec.name == "add")
    assert add.parameters["properties"].keys() == {"a", "b"}
    assert add.parameters["required"] == ["a", "b"]
    assert add.description == "Add two integers."


def test_arguments_that_do_not_fit_the_schema_never_reach_the_server(
    toolset: McpToolset, records: Path
) -> None:
    before = lines(records / "calls.log")
    output, status, _ = run(toolset, 'count {"nam": "x"}')
    assert status is RunStatus.COMPLETED
    assert "InvalidArguments" in output and "'name' is a required property" in output
    assert lines(records / "calls.log") == before


def test_each_call_carries_its_idempotency_key_in_meta(toolset: McpToolset) -> None:
    tool = next(t for t in toolset.tools_for("acme") if t.name == "count")
    context = ToolContext("acme", "s-1", "run-1", 3, "c-1", position=0)
    call = ToolCall(id="c-1", name="count", arguments='{"name": "k"}')
    first = tool.execute(call, context)
    again = tool.execute(call, context)  # the same call executed again: the same key
    second = ToolContext("acme", "s-1", "run-1", 3, "c-2", position=1)
    other = tool.execute(call, second)  # the step's next call: its own key
    key = context.idempotency_key
    assert first.output == f"k: call 1 with key {key}"
    assert again.output == f"k: call 2 with key {key}"
    assert other.output == f"k: call 1 with key {second.idempotency_key}"


def test_a_tools_error_is_a_tool_error_the_model_sees(toolset: McpToolset) -> None:
    output, status, _ = run(toolset, 'fail {"reason": "the disk is full"}')
    assert status is RunStatus.COMPLETED
    error = json.loads(output.removeprefix("TOOL_ERROR: "))
    assert error["errorType"] == "McpToolError" and "the disk is full" in error["error"]


def test_a_hang_past_the_tools_limit_is_cancelled_and_the_connection_serves_on(
    toolset: McpToolset, pool: McpPool
) -> None:
    run(toolset, 'add {"a": 1, "b": 1}')
    opened = pool.opened()["test"]
    output, status, _ = run(toolset, 'hang {"seconds": 600}')
    assert status is RunStatus.COMPLETED
    assert "McpTimeout" in output and "within 1.0 s" in output
    assert run(toolset, 'add {"a": 1, "b": 1}')[0] == "2"
    assert pool.opened()["test"] == opened  # a hang is not a crash: no restart


def test_ten_megabytes_are_refused_over_the_servers_limit(toolset: McpToolset) -> None:
    output, status, session = run(toolset, 'huge {"megabytes": 10}')
    assert status is RunStatus.COMPLETED
    error = json.loads(output.removeprefix("TOOL_ERROR: "))
    assert error["errorType"] == "McpResultTooLarge"
    assert "10000000 bytes, over its max_result_bytes of 1000000" in error["error"]
    stored = sum(len(e.model_dump_json()) for e in session.events)  # type: ignore[attr-defined]
    assert stored < 100_000  # the 10 MB went nowhere


def test_a_list_change_brings_the_new_tool_at_the_next_step(toolset: McpToolset) -> None:
    assert "grown" not in [t.name for t in toolset.tools_for("acme")]
    assert run(toolset, "grow")[0] == "grown"
    eventually(lambda: "grown" in [t.name for t in toolset.tools_for("acme")], timeout_s=10)
    assert run(toolset, "grown")[0] == "I am new"


@pytest.fixture
def legacy(tmp_path: Path) -> Iterator[McpToolset]:
    """The hand-written 2025-11-25 server (:mod:`tests.support.mcp_legacy_server`)."""
    script = Path(__file__).parent / "support" / "mcp_legacy_server.py"
    pool = McpPool(Settings())
    yield McpToolset(McpServer.stdio("legacy", [sys.executable, str(script)]), pool=pool)
    pool.close()


def test_a_malformed_result_is_a_tool_error(legacy: McpToolset) -> None:
    output, status, _ = run(legacy, "broken")
    assert status is RunStatus.COMPLETED
    error = json.loads(output.removeprefix("TOOL_ERROR: "))
    assert error["errorType"] == "McpMalformedResult"
    assert "malformed result" in error["error"] and "valid list" in error["error"]


def test_a_list_change_notified_by_an_earlier_protocol_brings_the_new_tool(
    legacy: McpToolset,
) -> None:
    assert "grown" not in [t.name for t in legacy.tools_for("acme")]
    assert run(legacy, "grow")[0] == "grown"
    eventually(lambda: "grown" in [t.name for t in legacy.tools_for("acme")], timeout_s=10)
    assert run(legacy, "grown")[0] == "I am new"


def test_a_tenant_outside_the_allow_list_sees_no_tools_and_sends_nothing(tmp_path: Path) -> None:
    settings = Settings(mcp_servers=servers_env(tmp_path), mcp_tenants='{"acme": ["test"]}')
    pool = McpPool(settings)
    try:
        seen: list[ModelRequest] = []
        agent = mcp_agent(McpToolset("test", pool=pool))
        inner = agent.model.complete
        agent.model.complete = lambda request: seen.append(request) or inner(request)  # type: ignore[method-assign]
        result = agent.new_session(tenant="other").run('count {"name": "n"}')
        assert result.status is RunStatus.COMPLETED
        assert "UnknownTool" in (result.output or "")
        assert seen[0].tools == ()  # its model was offered none of the server's tools
        assert not (tmp_path / "starts.log").exists()  # no server was even started for it
        # a tool got for an allowed tenant, called for another: refused, nothing sent
        tool = next(t for t in McpToolset("test", pool=pool).tools_for("acme") if t.name == "count")
        refused = tool.execute(
            ToolCall(id="c", name="count", arguments='{"name": "n"}'),
            ToolContext("other", "s", "r", 0, "c", position=0),
        )
        error = json.loads(refused.output.removeprefix("TOOL_ERROR: "))
        assert error["errorType"] == "McpNotAllowed" and "TETHER_MCP_TENANTS" in error["error"]
        assert not (tmp_path / "calls.log").exists()  # nothing reached the server
    finally:
        pool.close()


def test_approval_and_waiting_work_for_mcp_tools(toolset: McpToolset, records: Path) -> None:
    options = AgentOptions(require_approval=frozenset({"count"}))
    agent = mcp_agent(toolset, options=options)
    session = agent.new_session(tenant="acme")
    before = len(lines(records / "calls.log"))
    waiting = session.run('count {"name": "approved"}')
    assert waiting.status is RunStatus.WAITING and waiting.pending[0].reason == "approval"
    assert len(lines(records / "calls.log")) == before  # not run before it is approved
    session.approve(waiting.pending[0].call_id)
    done = session.run(None)
    assert done.status is RunStatus.COMPLETED and "approved: call 1 with key tk-" in (
        done.output or ""
    )

    later = agent.new_session(tenant="acme")
    parked = later.run("later")
    assert parked.status is RunStatus.WAITING and parked.pending[0].reason == "output"
    later.submit_tool_output(parked.pending[0].call_id, "it came")
    assert later.run(None).output == "it came"


def test_the_servers_credentials_never_reach_the_conversation(tmp_path: Path) -> None:
    token = "tok-" + tmp_path.name + "-0123456789"
    command = server_command()
    server = McpServer.stdio(
        "secretive", command, env={"TETHER_TEST_MCP_DIR": str(tmp_path), "TEST_TOKEN": token}
    )
    pool = McpPool(Settings())
    try:
        output, status, session = run(McpToolset(server, pool=pool), "whoami")
        assert status is RunStatus.COMPLETED and output.startswith("token=***")
        assert token not in "".join(e.model_dump_json() for e in session.events)  # type: ignore[attr-defined]
    finally:
        pool.close()


def test_each_call_is_counted_and_traced(toolset: McpToolset) -> None:
    from tests.support.otel_spans import memory_exporter

    spans = memory_exporter()
    labels = {"server": "test", "tool": "add", "status": "ok"}
    before = REGISTRY.get_sample_value("tether_mcp_call_seconds_count", labels) or 0.0
    run(toolset, 'add {"a": 1, "b": 2}')
    assert REGISTRY.get_sample_value("tether_mcp_call_seconds_count", labels) == before + 1
    errors = {"server": "test", "tool": "fail", "status": "error"}
    before_errors = REGISTRY.get_sample_value("tether_mcp_call_seconds_count", errors) or 0.0
    run(toolset, 'fail {"reason": "no"}')
    assert REGISTRY.get_sample_value("tether_mcp_call_seconds_count", errors) == before_errors + 1
    mcp = [s for s in spans.get_finished_spans() if s.name == "tether.mcp"]
    assert {(s.attributes or {}).get("tether.mcp.status") for s in mcp} >= {"ok", "error"}
    tool_spans = {
        s.context.span_id: s for s in spans.get_finished_spans() if s.name == "tether.tool"
    }
    assert all(s.parent is not None and s.parent.span_id in tool_spans for s in mcp)


def test_one_connection_serves_every_run_of_the_process(toolset: McpToolset, pool: McpPool) -> None:
    run(toolset, 'add {"a": 0, "b": 0}')
    opened = pool.opened()["test"]
    for n in range(20):
        assert run(toolset, f'add {{"a": {n}, "b": 1}}')[0] == str(n + 1)
    assert run(toolset, 'add+add {"a": 1, "b": 1}', parallel_tool_calls=True)[0] == "2 | 2"
    assert pool.opened()["test"] == opened


def test_a_streamable_http_server_with_headers(tmp_path: Path) -> None:
    import subprocess

    from tether.dev.redis_server import free_port

    port = free_port()
    env = {"TETHER_TEST_MCP_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([*server_command(), "http", str(port)], env=env)
    token = "ghp_" + "a1" * 18
    server = McpServer.http(
        "remote", f"http://127.0.0.1:{port}/mcp", headers={"Authorization": f"Bearer {token}"}
    )
    pool = McpPool(Settings())
    toolset = McpToolset(server, pool=pool)
    try:
        eventually(lambda: _listening(port), timeout_s=30)
        assert run(toolset, 'add {"a": 20, "b": 22}')[0] == "42"
        assert run(toolset, "whoami")[0] == "token= auth=***"  # it came, and was masked
        assert "McpToolError" in run(toolset, 'fail {"reason": "x"}')[0]
    finally:
        pool.close()
        proc.terminate()
        proc.wait(timeout=10)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
