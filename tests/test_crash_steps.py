"""Crash the real worker cycle at every named commit step, recover, and check exactly-once effect.

For each step of :class:`tether.worker.engine.commit.CommitStep`, before and after it: a worker
applies a
run and dies there; its lease expires; the broker redelivers the request and a second worker
drains the session. Then: the request is applied once (one user message, one applied record,
one completion), the history is gapless with no duplicate, and fold(history) == stored memory.
The same scenarios run on in-memory backends (no servers, fast) and on a real redis-server with
S3 over HTTP (moto).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.crash import (
    TENANT,
    Backends,
    PowerSwitch,
    SimulatedCrash,
    crash_at,
    memory_backends,
    request_for,
    worker_runtime,
)
from tether import SessionLogReader
from tether.core.items import UserMessage
from tether.runs.contract import RunRequest
from tether.runs.queue.base import SubmitState, submit
from tether.worker.engine.commit import CommitStep
from tether.worker.engine.cycle import drain

#: Steps a run takes only when its session parks or settles a call on the fleet: their crash
#: suite is tests/test_waits_crash.py (a suspend and a wake crashed at every step).
WAIT_STEPS = frozenset({CommitStep.WAIT_MARK, CommitStep.WAIT_INDEX})
CRASH_POINTS = [
    (step, phase) for step in CommitStep if step not in WAIT_STEPS for phase in ("before", "after")
]


def apply(backends: Backends, worker_id: str, request: RunRequest, **kw: int) -> None:
    """What ``tether.run`` does on a worker: register the request, drain the session."""
    rt = worker_runtime(backends, worker_id, **kw)
    submit(rt.runs, request)
    drain(rt, request.tenant, request.session_id)


def assert_exactly_once(backends: Backends, session_id: str, requests: list[RunRequest]) -> None:
    reader = SessionLogReader(backends.store, backends.archive)
    report = reader.verify(session_id, tenant=TENANT)
    assert report.ok, report.problems  # gapless, no duplicate, fold(history) == stored memory
    head = reader.read(session_id, tenant=TENANT)
    assert head is not None
    applied = [r.request_id for r in head.applied]
    inputs = [i.content for i in head.memory.items if isinstance(i, UserMessage)]
    for request in requests:
        assert applied.count(request.request_id) == 1, (request.request_id, applied)
        assert inputs.count(request.input) == 1, (request.input, inputs)
        view = backends.runs.get(request.ref)
        assert view is not None and view.result is not None, request.run_id
        assert view.result.status == "COMPLETED"
        assert view.result.output == str(eval(request.input or "", {}))  # calculator's answer
    done = [run for _, run in backends.runs.read_done(b"0-0", block_ms=0)]
    for request in requests:
        assert done.count(request.ref) == 1, (request.ref, done)
    live = {e.seq: e for e in backends.stream.read(TENANT, session_id)}
    for event in reader.events(session_id, tenant=TENANT):
        # the live stream shows the committed attempt wherever the dead one had written
        assert live[event.seq] == event, event.seq


@pytest.mark.parametrize(("step", "phase"), CRASH_POINTS, ids=lambda v: str(v))
def test_crash_at_commit_step_is_recovered_exactly_once(
    make_backends: Callable[[], Backends], step: CommitStep, phase: str
) -> None:
    backends = make_backends()
    session_id = f"s-{step}-{phase}"
    history = [request_for(session_id, text) for text in ("1+1", "2*3")]
    for request in history:
        apply(backends, "warm-up", request)

    doomed = request_for(session_id, "6*7")
    switch = PowerSwitch()
    with crash_at(step, phase, "w1", switch) as fired, pytest.raises(SimulatedCrash):
        apply(backends, "w1", doomed, switch=switch)  # type: ignore[arg-type]
    assert fired, f"the cycle never reached {phase} {step}"

    backends.expire_lease(TENANT, session_id)
    apply(backends, "w2", doomed)  # the broker redelivers the message to another worker
    apply(backends, "w3", doomed)  # and once more: at-least-once delivery
    after = request_for(session_id, "10-4")
    apply(backends, "w2", after)  # the session goes on
    assert_exactly_once(backends, session_id, [*history, doomed, after])


def test_every_commit_step_is_covered() -> None:
    """The suite above crashes at each step the commit names, before and after it (the wait
    steps: tests/test_waits_crash.py, at every step)."""
    assert {s for s, _ in CRASH_POINTS} | WAIT_STEPS == set(CommitStep)
    assert len(CRASH_POINTS) == 2 * (len(CommitStep) - len(WAIT_STEPS)) == 18


def test_crash_without_archiving_keeps_the_outbox_in_the_head() -> None:
    """With the default batch, most commits write no segment: a crash after the head write
    must still lose nothing (the events live in the head's outbox until a batch fills)."""
    backends = memory_backends()
    session_id = "s-outbox"
    doomed = request_for(session_id, "3+4")
    switch = PowerSwitch()
    with crash_at(CommitStep.HEAD_PUT, "after", "w1", switch), pytest.raises(SimulatedCrash):
        apply(backends, "w1", doomed, switch=switch, archive_batch_events=32)  # type: ignore[arg-type]
    assert backends.archive.last_seq(TENANT, session_id) == 0
    backends.expire_lease(TENANT, session_id)
    apply(backends, "w2", doomed, archive_batch_events=32)
    assert_exactly_once(backends, session_id, [doomed])


def test_redelivered_request_after_commit_is_a_duplicate() -> None:
    backends = memory_backends()
    first = request_for("s-dup", "5+5")
    apply(backends, "w1", first)
    rt = worker_runtime(backends, "w2")
    assert submit(rt.runs, first).state is SubmitState.DUPLICATE
    assert drain(rt, TENANT, "s-dup") == 0
    assert_exactly_once(backends, "s-dup", [first])
