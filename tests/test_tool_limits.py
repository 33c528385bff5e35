"""#29 item 7 in-process: a tool's own ``timeout_s`` is a limit that holds.

- A tool that declares ``timeout_s`` runs isolated (unless it says ``isolated=False``), so even a
  call that holds the GIL is stopped at its limit and fails as ``ToolTimeout``.
- A process the tool started is killed with it (before, ``sleep 600`` outlived the call).
- A run that used up its attempt budget reports the attempts it made (before: 0).
- An isolated call that returns at once is done at once although a process it forked lives on
  (before: the forked process held the reply pipe open and the call failed as ``ToolTimeout``
  at its limit); the forked process is still killed with the call. One whose process dies
  without a reply fails as ``ToolCrashed`` at once, not at its limit.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.support.crash import (
    TENANT,
    PowerSwitch,
    SimulatedCrash,
    crash_at,
    memory_backends,
    request_for,
    worker_runtime,
)
from tests.support.limit_agents import hog, is_running, slow
from tests.support.stack import eventually
from tether import tool
from tether.core.items import ToolCall
from tether.runs.queue.base import submit
from tether.runtime.tool_runner import run_with_timeout
from tether.runtime.tools import Tool, ToolContext
from tether.worker.engine.commit import CommitStep
from tether.worker.engine.cycle import drain

FORK_LIMIT_S = 10.0


@tool(name="forks", description="Fork a helper that sleeps, then answer.", timeout_s=FORK_LIMIT_S)
def forks(pid_file: str, then: str) -> str:
    pid = os.fork()
    if pid == 0:  # the helper: outlives the tool's own answer by far
        time.sleep(60)
        os._exit(0)
    Path(pid_file).write_text(str(pid))
    if then == "die":
        os._exit(3)  # no reply at all, as a crash in a C extension would leave it
    return "done at once"


def _call(name: str, args: dict[str, object]) -> ToolCall:
    return ToolCall(id="call_1", name=name, arguments=json.dumps(args))


def test_a_tool_declaring_a_timeout_is_isolated_unless_it_says_otherwise() -> None:
    assert hog.isolated and slow.isolated
    assert not Tool(lambda: "x", name="plain").isolated
    assert not Tool(lambda: "x", name="soft", timeout_s=1.0, isolated=False).isolated


def test_a_gil_holding_call_past_its_timeout_fails_as_tool_timeout() -> None:
    context = ToolContext("acme", "s1", "run-1", 1, "call_1")
    outcome = run_with_timeout(hog, _call("hog", {"exponent": 10**9}), context, None)
    assert outcome.status == "FAILED"
    assert "ToolTimeout" in outcome.output


def test_processes_a_tool_started_are_killed_with_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    context = ToolContext("acme", "s1", "run-1", 1, "call_1")
    outcome = run_with_timeout(slow, _call("slow", {"pid_file": str(pid_file)}), context, None)
    assert "ToolTimeout" in outcome.output
    pid = int(pid_file.read_text())
    eventually(lambda: not is_running(pid), timeout_s=30)


def test_a_run_out_of_attempts_reports_the_attempts_it_made() -> None:
    backends = memory_backends()
    request = request_for("s-budget", "6*7")
    for attempt in range(3):  # the worker runtime allows 3 attempts
        switch = PowerSwitch()
        rt = worker_runtime(backends, f"w{attempt}", switch=switch)
        doomed = crash_at(CommitStep.HEAD_PUT, "before", f"w{attempt}", switch)
        with doomed, pytest.raises(SimulatedCrash):
            submit(rt.runs, request)
            drain(rt, TENANT, request.session_id)
        backends.expire_lease(TENANT, request.session_id)
    rt = worker_runtime(backends, "w-last")
    submit(rt.runs, request)
    drain(rt, TENANT, request.session_id)
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None
    assert view.result.error_type == "RetriesExhausted"
    assert view.result.attempts == 3


def _run_forks(tmp_path: Path, then: str) -> tuple[str, float, int]:
    pid_file = tmp_path / "pid"
    context = ToolContext("acme", "s1", "run-1", 1, "call_1")
    call = _call("forks", {"pid_file": str(pid_file), "then": then})
    started = time.monotonic()
    outcome = run_with_timeout(forks, call, context, None)
    return outcome.output, time.monotonic() - started, int(pid_file.read_text())


def test_an_isolated_call_is_done_at_once_though_a_process_it_forked_lives_on(
    tmp_path: Path,
) -> None:
    output, elapsed_s, helper = _run_forks(tmp_path, "answer")
    assert output == "done at once"
    assert elapsed_s < FORK_LIMIT_S / 2  # before: ToolTimeout after the whole limit
    eventually(lambda: not is_running(helper), timeout_s=30)  # still killed with the call


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfd: seen at the limit instead")
def test_an_isolated_call_dying_without_a_reply_fails_at_once_though_its_fork_lives_on(
    tmp_path: Path,
) -> None:
    output, elapsed_s, helper = _run_forks(tmp_path, "die")
    assert "ToolCrashed" in output
    assert elapsed_s < FORK_LIMIT_S / 2
    eventually(lambda: not is_running(helper), timeout_s=30)


def test_an_isolated_call_works_when_the_worker_holds_over_1024_descriptors(
    tmp_path: Path,
) -> None:
    """The call waited on its reply with ``select``, which cannot watch a descriptor numbered
    past 1024 (ValueError): a worker holding many connections and files failed every isolated
    call. It polls now."""
    held: list[int] = []
    try:
        while not held or held[-1] <= 1100:  # the call's pipe is made after these
            held.append(os.open(os.devnull, os.O_RDONLY))
        output, _elapsed_s, helper = _run_forks(tmp_path, "answer")
    finally:
        for fd in held:
            os.close(fd)
    assert output == "done at once"
    eventually(lambda: not is_running(helper), timeout_s=30)
