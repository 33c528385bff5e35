"""SIGKILL a real worker at every commit step of a run that parks on a timer, and at every commit
step of the timer's wake (redis-server, S3 over HTTP, 2 workers): the run is recovered, parked
once, woken once by the sweepers, and goes on to its end; the session verifies. The in-process
suite (tests/test_waits_crash.py) crashes both at every step too."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.crash_agents import crash_worker_env, session_for, wake_session_for
from tests.support.stack import Stack, unique
from tether.core.results import RunStatus
from tether.dev.workers import WorkerFleet
from tether.producer import Producer
from tether.runs.waits.base import wake_request_id
from tether.worker.engine.commit import CommitStep

QUEUE = "waitcrashq"


@pytest.mark.slow  # a long variant: `make test-long`
@pytest.mark.parametrize("killed", ["suspend", "wake"])
def test_sigkill_at_every_commit_step_of_a_timer_wait_wakes_once(
    live_stack: Stack, tmp_path: Path, killed: str
) -> None:
    crash_dir = tmp_path / "crashes"
    env = crash_worker_env(live_stack.env, crash_dir, QUEUE, "tests.support.wait_agents")
    suffix = unique("w")
    name = session_for if killed == "suspend" else wake_session_for
    sessions = {
        name(step.value, phase, suffix): (step, phase)
        for step in CommitStep
        for phase in ("before", "after")
        if killed == "suspend" or step is not CommitStep.LEASE_RELEASE  # the drain's, no run's
    }
    producer = Producer(live_stack.settings.model_copy(update={"queue": QUEUE}))
    fleet = WorkerFleet(env, tmp_path, count=2, queue=QUEUE, prefix="wcrash")
    try:
        fleet.start()
        handles = {sid: producer.run_async(sid, "nap 1", agent="sleeper") for sid in sessions}
        results = {sid: h.result(timeout=240, follow=True) for sid, h in handles.items()}
    finally:
        fleet.stop()
        producer.close()
    crashed = {p.name for p in crash_dir.iterdir()}
    assert not [sessions[s] for s in sessions if s not in crashed], "a step was never reached"
    reader = live_stack.reader()
    for sid, result in results.items():
        assert result.status is RunStatus.COMPLETED, (sessions[sid], result)
        head = reader.read(sid)
        assert head is not None
        applied = [r.request_id for r in head.applied]
        assert applied.count(handles[sid].request_id) == 1, (sessions[sid], applied)
        wakes = [r for r in applied if r.startswith("wake-")]
        assert len(wakes) == 1 and wakes[0] == wake_request_id("default", sid, "call_1")
        report = reader.verify(sid)
        assert report.ok, (sessions[sid], report.problems)
