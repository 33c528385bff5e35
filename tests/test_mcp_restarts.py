"""#49: an MCP server's connection on the pool, restarted: after a crash in the middle of a
call, after an exit between two calls (before the next call is sent), after a freeze (its health
check fails), and after a start that fails (spaced by a backoff). Each pool here is the test's
own, with a real server process (:mod:`tests.support.mcp_server`) counting its starts.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

from tests.support.stack import eventually
from tests.test_mcp_tools import lines, own_pool, run
from tether.core.results import RunStatus
from tether.integrations.mcp import McpPool, McpServer, McpToolset
from tether.settings import Settings


def test_a_server_crashing_mid_call_is_a_tool_error_and_the_next_call_restarts_it(
    tmp_path: Path,
) -> None:
    pool = own_pool(tmp_path)
    toolset = McpToolset("test", pool=pool)
    try:
        output, status, _ = run(toolset, "crash")
        assert status is RunStatus.COMPLETED and "McpConnectionLost" in output
        assert run(toolset, 'add {"a": 2, "b": 2}')[0] == "4"
        assert pool.opened() == {"test": 2}
        assert len(lines(tmp_path / "starts.log")) == 2  # counted by the servers themselves
    finally:
        pool.close()


def test_a_server_that_exited_between_calls_is_restarted_before_the_next_is_sent(
    tmp_path: Path,
) -> None:
    pool = own_pool(tmp_path)
    toolset = McpToolset("test", pool=pool)
    try:
        assert run(toolset, "exit_soon")[0] == "bye"
        eventually(lambda: not pool.connected(toolset.server), timeout_s=30)  # its end was seen
        assert run(toolset, 'add {"a": 1, "b": 1}')[0] == "2"  # no McpConnectionLost
        assert pool.opened() == {"test": 2}
    finally:
        pool.close()


def test_a_frozen_server_fails_its_health_check_and_is_restarted(tmp_path: Path) -> None:
    pool = own_pool(tmp_path, tool_timeouts_s={"freeze": 0.5}, health_timeout_s=1.0)
    toolset = McpToolset("test", pool=pool)
    try:
        output, _, _ = run(toolset, "freeze")
        assert "McpTimeout" in output
        frozen = int(lines(tmp_path / "starts.log")[0])
        assert run(toolset, 'add {"a": 3, "b": 3}')[0] == "6"  # on a new server process
        assert pool.opened() == {"test": 2}
        eventually(lambda: not _alive(frozen), timeout_s=30)  # the frozen one was ended
    finally:
        pool.close()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_server_that_cannot_start_is_retried_after_a_backoff(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    script = f"open({str(starts)!r}, 'a').write('x\\n')"  # starts, then exits at once
    server = McpServer.stdio("broken", [sys.executable, "-c", script], connect_timeout_s=10)
    pool = McpPool(Settings())
    try:
        from tether.integrations.mcp.errors import McpUnavailable

        with pytest.raises(McpUnavailable, match="could not be started"):
            pool.call(server, "add", {}, key="k", timeout_s=10)
        with pytest.raises(McpUnavailable, match="next attempt is in"):
            pool.call(server, "add", {}, key="k", timeout_s=10)
        assert lines(starts) == ["x"]  # the second call started nothing
        toolset = McpToolset(server, pool=pool)
        assert toolset.tools_for("acme") == ()  # no tools this step; the run goes on
        eventually(lambda: _started_again(pool, server, starts), timeout_s=10)
    finally:
        pool.close()


def _started_again(pool: McpPool, server: McpServer, starts: Path) -> bool:
    from tether.integrations.mcp.errors import McpUnavailable

    with contextlib.suppress(McpUnavailable):  # still backing off: not yet
        pool.call(server, "add", {}, key="k", timeout_s=10)
    return len(lines(starts)) == 2
