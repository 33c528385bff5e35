"""#29 item 7 on real prefork workers: a tool past its ``timeout_s`` fails that call, once.

Before, a tool holding the GIL past its 1 s limit could not be waited on: the guardian killed the
worker past the run's deadline and the run was retried as a crash (~44 s over three attempts,
reported as ``attempts=0``); a process the tool started outlived the run. Now the call fails as
``ToolTimeout``, the model sees it, the run completes in one attempt and nothing is left running.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.limit_agents import is_running
from tests.support.own_fleet import own_fleet
from tests.support.stack import Stack, eventually, unique
from tether.producer import Producer

QUEUE = "limitq"


@pytest.fixture(scope="module")
def limited(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Producer]:
    with own_fleet(
        stack,
        tmp_path_factory.mktemp("limited"),
        queue=QUEUE,
        agent_modules="tests.support.limit_agents",
    ) as producer:
        yield producer


def test_a_gil_holding_tool_past_its_limit_fails_the_call_in_one_attempt(
    limited: Producer,
) -> None:
    result = limited.run(unique("hog"), f"hog {10**9}", agent="limited", timeout_s=120)
    assert result.status == "COMPLETED", result
    assert "ToolTimeout" in (result.output or "")  # the model saw the call fail
    assert result.attempts == 1


def test_a_process_the_tool_started_dies_with_it(limited: Producer, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    result = limited.run(unique("slow"), f"slow {pid_file}", agent="limited", timeout_s=120)
    assert result.status == "COMPLETED", result
    assert "ToolTimeout" in (result.output or "")
    assert result.attempts == 1
    pid = int(pid_file.read_text())
    eventually(lambda: not is_running(pid), timeout_s=30)
