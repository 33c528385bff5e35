"""The crash suite's scenarios once more with real worker processes, redis-server and S3 over HTTP.

Each of the 14 crash points (every commit step, before and after) gets its own session; a worker
process SIGKILLs itself there (see tests/support/crash_agents.py), and the run must still be
applied exactly once: the handle resolves COMPLETED with the right answer, the head records the
request once, and `verify` passes (gapless history, fold == stored memory).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.crash_agents import crash_worker_env, session_for
from tests.support.stack import Stack, unique
from tests.test_crash_steps import WAIT_STEPS
from tether.core.items import UserMessage
from tether.dev.workers import WorkerFleet
from tether.producer import Producer
from tether.worker.engine.commit import CommitStep

QUEUE = "crashq"


@pytest.mark.slow  # a long variant: `make test-long` (keeps `make test` under 10 min)
def test_sigkill_at_every_commit_step_applies_each_run_once(
    live_stack: Stack, tmp_path: Path
) -> None:
    crash_dir = tmp_path / "crashes"
    env = crash_worker_env(live_stack.env, crash_dir, QUEUE)
    suffix = unique("k")
    sessions = {
        session_for(step.value, phase, suffix): (step, phase)
        for step in CommitStep
        if step not in WAIT_STEPS  # a calculator run parks nothing: tests/test_waits_crash*.py
        for phase in ("before", "after")
    }
    producer = Producer(live_stack.settings.model_copy(update={"queue": QUEUE}))
    fleet = WorkerFleet(env, tmp_path, count=2, queue=QUEUE, prefix="crash")
    try:
        fleet.start()
        warm = [producer.run_async(sid, "1+1", agent="calculator") for sid in sessions]
        assert all(h.result(timeout=120).output == "2" for h in warm)
        doomed = {sid: producer.run_async(sid, "6*7", agent="calculator") for sid in sessions}
        results = {sid: h.result(timeout=180) for sid, h in doomed.items()}
    finally:
        fleet.stop()
        producer.close()
    crashed = {p.name for p in crash_dir.iterdir()}
    missed = [sessions[sid] for sid in sessions if sid not in crashed]
    assert not missed, f"no worker died at {missed}"
    reader = live_stack.reader()
    for sid, result in results.items():
        assert result.output == "42", (sessions[sid], result)
        head = reader.read(sid)
        assert head is not None
        applied = [r.request_id for r in head.applied]
        assert applied.count(doomed[sid].request_id) == 1, (sessions[sid], applied)
        inputs = [i.content for i in head.memory.items if isinstance(i, UserMessage)]
        assert inputs == ["1+1", "6*7"], (sessions[sid], inputs)
        report = reader.verify(sid)
        assert report.ok, (sessions[sid], report.problems)
