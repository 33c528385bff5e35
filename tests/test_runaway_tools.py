"""#18 hole 6 in-process: a tool that holds the CPU and the GIL cannot hold a run or a worker.

- The calculator refuses the red-team's nested power at once (it used to compute for ~24 s).
- A tool declared ``isolated`` runs in a child process that is killed at its limit, even though
  the computation never releases the GIL.
- The guardian (another process's view of a run) renews the lease of a process whose own
  heartbeat is starved, and kills that process once its run is past its deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis

from tests.support.runaway_agents import ISOLATED_LIMIT_S, burn_isolated
from tether.core.items import ToolCall
from tether.ids import new_id
from tether.keys import RedisKeys
from tether.runs.leases.redis import RedisLeaseManager
from tether.runtime.demo_agents import calculate
from tether.runtime.tool_runner import run_with_timeout
from tether.runtime.tools import ToolContext
from tether.worker.engine.guard import FileGuard, Guardian, WatchRecord

RED_TEAM_EXPRESSION = "((((9**64)**64)**64)**64)"
#: 7**(10**9) takes minutes: far beyond every limit below.
FOREVER_EXPONENT = 10**9


def _call(name: str, args: dict[str, object]) -> ToolCall:
    return ToolCall(id="call_1", name=name, arguments=json.dumps(args))


def test_calculator_refuses_the_nested_power_instead_of_computing_it() -> None:
    outcome = calculate.execute(_call("calculate", {"expression": RED_TEAM_EXPRESSION}))
    assert outcome.status == "FAILED"
    assert "result too large" in outcome.output
    # ordinary powers still work
    assert calculate.execute(_call("calculate", {"expression": "9**64"})).output == str(9**64)
    assert calculate.execute(_call("calculate", {"expression": "2**-2"})).output == "0.25"


def test_isolated_tool_is_killed_at_its_limit_although_it_holds_the_gil() -> None:
    context = ToolContext("acme", "s1", "run-1", 1, "call_1")
    children_before = _children()
    started = time.monotonic()
    outcome = run_with_timeout(
        burn_isolated, _call("burn", {"exponent": FOREVER_EXPONENT}), context, None
    )
    elapsed_s = time.monotonic() - started
    assert outcome.status == "FAILED"
    assert "ToolTimeout" in outcome.output and "killed" in outcome.output
    # the limit holds (1 s), far below the minutes the computation needs
    assert elapsed_s < ISOLATED_LIMIT_S + 10, elapsed_s
    assert _children() <= children_before  # the killed child is gone: nothing left computing


def _children() -> set[int]:
    """Live child processes of this test process (from /proc)."""
    me, found = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def test_isolated_tool_returns_its_result() -> None:
    context = ToolContext("acme", "s1", "run-1", 1, "call_1")
    outcome = run_with_timeout(burn_isolated, _call("burn", {"exponent": 10}), context, None)
    assert outcome.status == "COMPLETED", outcome
    assert outcome.output == f"burned: {(7**10).bit_length()} bits"


def _hog() -> subprocess.Popen[bytes]:
    """A process stuck in one GIL-holding computation (its own heartbeat could never run)."""
    return subprocess.Popen([sys.executable, "-c", f"pow(7, {FOREVER_EXPONENT})"])


def test_guardian_keeps_a_starved_lease_and_kills_the_process_past_its_deadline(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    leases = RedisLeaseManager(redis_client, keys=RedisKeys(f"guard-{new_id('g')[-8:]}"))
    ttl_ms = 600
    lease = leases.acquire("acme", "s1", "w1:stuck", ttl_ms)
    assert lease is not None
    hog = _hog()
    killed: list[WatchRecord] = []
    try:
        deadline_s = time.time() + 2.0
        record = WatchRecord(
            pid=hog.pid,
            tenant="acme",
            session_id="s1",
            owner=lease.owner,
            fence=lease.fence,
            run_id="run-1",
            deadline_s=deadline_s,
        )
        (tmp_path / f"{hog.pid}.json").write_text(record.model_dump_json())
        guardian = Guardian(tmp_path, leases, ttl_ms, grace_s=0.5, on_kill=killed.append)
        guardian.start()
        try:
            time.sleep(3 * ttl_ms / 1000)  # three TTLs with nobody else renewing
            assert leases.holder("acme", "s1") == "w1:stuck"  # the guardian kept it
            assert hog.poll() is None
            assert hog.wait(timeout=30) == -9  # killed once past deadline + grace
        finally:
            guardian.stop()
        assert time.time() >= deadline_s + 0.5
        assert [r.run_id for r in killed] == ["run-1"]
        assert not list(tmp_path.glob("*.json"))
        # nobody renews a killed process's lease: it expires and the run can move on
        time.sleep(2 * ttl_ms / 1000)
        assert leases.holder("acme", "s1") is None
    finally:
        hog.kill()
        hog.wait()


def test_guardian_does_not_keep_a_stopped_process_lease(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A frozen process (SIGSTOP) is not computing: its lease must expire so another worker
    takes the session over (the zombie is then fenced out)."""
    leases = RedisLeaseManager(redis_client, keys=RedisKeys(f"guard-{new_id('g')[-8:]}"))
    ttl_ms = 600
    lease = leases.acquire("acme", "s4", "w4:frozen", ttl_ms)
    assert lease is not None
    hog = _hog()
    try:
        os.kill(hog.pid, signal.SIGSTOP)
        record = WatchRecord(
            pid=hog.pid,
            tenant="acme",
            session_id="s4",
            owner=lease.owner,
            fence=lease.fence,
            run_id="run-4",
            deadline_s=time.time() + 60,
        )
        (tmp_path / f"{hog.pid}.json").write_text(record.model_dump_json())
        guardian = Guardian(tmp_path, leases, ttl_ms, grace_s=1)
        guardian.start()
        try:
            time.sleep(3 * ttl_ms / 1000)
            assert leases.holder("acme", "s4") is None  # expired: free for a takeover
        finally:
            guardian.stop()
    finally:
        hog.kill()
        hog.wait()


def test_guardian_forgets_records_of_dead_processes_and_never_renews_them(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    leases = RedisLeaseManager(redis_client, keys=RedisKeys(f"guard-{new_id('g')[-8:]}"))
    lease = leases.acquire("acme", "s2", "w2:dead", 60_000)
    assert lease is not None
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = WatchRecord(
        pid=dead.pid,
        tenant="acme",
        session_id="s2",
        owner=lease.owner,
        fence=lease.fence,
        run_id="run-2",
        deadline_s=time.time() + 60,
    )
    (tmp_path / f"{dead.pid}.json").write_text(record.model_dump_json())
    counts = Guardian(tmp_path, leases, 60_000, grace_s=1).sweep_once()
    assert counts == {"renewed": 0, "killed": 0, "gone": 1}
    assert not list(tmp_path.glob("*.json"))


def test_file_guard_writes_and_clears_this_process_record(tmp_path: Path) -> None:
    from tether.runs.leases.base import Lease

    guard = FileGuard(tmp_path)
    lease = Lease("acme", "s3", "me", 7)
    guard.watch(lease, "run-3", 123.0)
    [path] = tmp_path.glob("*.json")
    record = WatchRecord.model_validate_json(path.read_bytes())
    assert (record.run_id, record.fence, record.deadline_s) == ("run-3", 7, 123.0)
    guard.clear(lease)
    assert not list(tmp_path.glob("*.json"))
