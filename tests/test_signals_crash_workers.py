"""SIGKILL a real worker at every commit step of a run parking on a signal, and of the wake that
delivers it (2 worker processes, redis-server and S3 over HTTP): each signal is delivered once,
each request applied once, and ``verify`` passes. A worker process SIGKILLs itself at the step
(tests/support/crash_agents.py); a wake session's marker is laid before its run parks and taken
away before the signal is sent, so its worker dies in the wake's commit, not the park's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.crash_agents import crash_worker_env, session_for
from tests.support.stack import Stack, finished, unique
from tether.core.results import RunStatus
from tether.dev.workers import WorkerFleet
from tether.producer import Producer
from tether.worker.engine.commit import CommitStep

QUEUE = "sigcrashq"
POINTS = [(step.value, phase) for step in CommitStep for phase in ("before", "after")]


@pytest.mark.slow  # a long variant: `make test-long`
def test_sigkill_at_every_commit_step_of_a_signal_wait_delivers_once(
    live_stack: Stack, tmp_path: Path
) -> None:
    crash_dir = tmp_path / "crashes"
    env = crash_worker_env(live_stack.env, crash_dir, QUEUE, "tests.support.signal_agents")
    tag = unique("k").replace("-", "")
    suspend = {session_for(s, p, tag + "s"): (s, p) for s, p in POINTS}
    wake = {session_for(s, p, tag + "w"): (s, p) for s, p in POINTS}
    for sid in wake:  # their parks must not crash
        (crash_dir / sid).touch()
    producer = Producer(live_stack.settings.model_copy(update={"queue": QUEUE}))
    fleet = WorkerFleet(env, tmp_path, count=2, queue=QUEUE, prefix="sigcrash")
    try:
        fleet.start()
        parked = {
            sid: producer.run_async(sid, "listen go 3600", agent="listener")
            for sid in [*suspend, *wake]
        }
        for sid, handle in parked.items():
            result = handle.result(timeout=180)
            assert result.status is RunStatus.WAITING, (sid, result)
        for sid in wake:
            (crash_dir / sid).unlink()
        woke = {sid: producer.signal(sid, "go", sid).woke_run_id for sid in parked}
        results = {
            sid: finished(producer, run_id, timeout_s=180) for sid, run_id in woke.items() if run_id
        }
    finally:
        fleet.stop()
        producer.close()
    assert set(results) == set(parked), [sid for sid in parked if sid not in results]
    crashed = {p.name for p in crash_dir.iterdir()}
    missed = [sid for sid in parked if sid not in crashed]
    assert not missed, f"no worker died at {missed}"
    reader = live_stack.reader()
    for sid, result in results.items():
        assert result.status is RunStatus.COMPLETED, (sid, result)
        delivered = [
            json.loads(p) for p in (result.output or "").removeprefix("got: ").split(" | ")
        ]
        assert [d["payload"] for d in delivered] == [sid], (sid, result.output)
        head = reader.read(sid)
        assert head is not None
        applied = [r.request_id for r in head.applied]
        assert len(applied) == len(set(applied)) == 2, (sid, applied)
        report = reader.verify(sid)
        assert report.ok, (sid, report.problems)
