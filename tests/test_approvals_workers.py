"""Human in the loop across processes, on real workers, redis-server and S3 over HTTP.

A run pauses for approval; the process that submitted it exits; the worker that ran it is
stopped; a new process approves the call; the run completes on the other worker, and the
session's memory and events show the approval.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.stack import Stack, unique
from tether.core.events import EventType
from tether.core.items import ToolOutput
from tether.dev.workers import WorkerFleet

QUEUE = "approvalq"

SUBMIT = """
import json, sys
from tether.producer import Producer
with Producer() as p:
    r = p.run(sys.argv[1], "transfer 250", agent="approver", wait_s=60)
    print(json.dumps({"status": r.status, "worker": r.worker,
                      "pending": [c.model_dump() for c in r.pending]}))
"""

APPROVE = """
import json, sys
from tether.producer import Producer
with Producer() as p:
    r = p.approve(sys.argv[1], sys.argv[2], agent="approver").run_result(timeout=60)
    print(json.dumps({"status": r.status, "worker": r.worker, "output": r.output}))
"""


def _python(code: str, env: dict[str, str], *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_approval_from_another_process_completes_on_another_worker(
    live_stack: Stack, tmp_path: Path
) -> None:
    env = dict(
        live_stack.env, TETHER_AGENT_MODULES="tests.support.approval_agents", TETHER_QUEUE=QUEUE
    )
    sid = unique("hitl")
    fleet = WorkerFleet(env, tmp_path, count=2, queue=QUEUE, prefix="hitl")
    try:
        fleet.start()
        waiting = _python(SUBMIT, env, sid)  # this process exits with the run WAITING
        assert waiting["status"] == "WAITING", waiting
        pending = waiting["pending"]
        assert isinstance(pending, list) and len(pending) == 1
        assert pending[0]["tool"] == "transfer" and pending[0]["reason"] == "approval"
        first = str(waiting["worker"])
        ran_it = [
            w
            for w in fleet.workers
            if (w.pid is not None and f":{w.pid}:" in first) or _child_of(first, w.pid)
        ]
        assert len(ran_it) == 1, (first, [w.pid for w in fleet.workers])
        ran_it[0].stop()  # the worker that paused the run is gone
        done = _python(APPROVE, env, sid, pending[0]["call_id"])
    finally:
        fleet.stop()
    assert done["status"] == "COMPLETED" and done["output"] == "done: transferred 250", done
    assert done["worker"] != first
    reader = live_stack.reader()
    assert reader.verify(sid).ok
    history = reader.events(sid)
    approvals = [e for e in history if e.type is EventType.TOOL_OUTPUT_REPLACED]
    assert len(approvals) == 1
    assert approvals[0].payload.output == "transferred 250"  # type: ignore[union-attr]
    head = reader.read(sid)
    assert head is not None
    assert [i.output for i in head.memory.items if isinstance(i, ToolOutput)] == ["transferred 250"]


def _child_of(worker_id: str, parent: int | None) -> bool:
    parts = worker_id.split(":")
    if parent is None or len(parts) < 2 or not parts[1].isdigit():
        return False
    try:
        with open(f"/proc/{parts[1]}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1]) == parent
    except FileNotFoundError:
        return False
