"""Crash a run that parks on a timer, and the wake that goes on with it, at every named commit
step (before and after each), recover the way a second worker would, and check: the timer is
indexed once, fires once, the wake is applied once, the run completes, nothing stays parked or
marked, and the session's log verifies. Memory backends and redis-server + S3 over HTTP."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.crash import (
    EVERY_CRASH_POINT,
    FAR_MS,
    TENANT,
    Backends,
    PowerSwitch,
    SimulatedCrash,
    crash_at,
    nap_request,
    worker_runtime,
)
from tests.support.wait_agents import sleeper_agent
from tether import SessionLogReader
from tether.core.results import RunStatus
from tether.runs.queue.base import submit
from tether.runs.waits.base import wake_request_id, wake_run_id
from tether.runtime.registry import AgentRegistry
from tether.worker.engine.commit import CommitStep
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices
from tether.worker.engine.wakes import wake_due


def _rt(backends: Backends, worker_id: str, switch: PowerSwitch | None = None) -> EngineServices:
    registry = AgentRegistry({"sleeper": sleeper_agent})
    return worker_runtime(backends, worker_id, switch=switch, registry=registry)


def _recover(backends: Backends, session_id: str) -> None:
    """The lease expires; the broker and the sweeper bring the session to two more workers."""
    backends.expire_lease(TENANT, session_id)
    drain(_rt(backends, "w2"), TENANT, session_id)
    drain(_rt(backends, "w3"), TENANT, session_id)


def _check_woken_once(backends: Backends, session_id: str) -> None:
    (call_id,) = {c for c in _parked_call_ids(backends, session_id)}
    woke = backends.runs.get(
        nap_request(session_id).ref._replace(run_id=wake_run_id(TENANT, session_id, call_id))
    )
    assert woke is not None and woke.result is not None
    assert woke.result.status is RunStatus.COMPLETED, woke.result
    reader = SessionLogReader(backends.store, backends.archive)
    report = reader.verify(session_id, tenant=TENANT)
    assert report.ok, report.problems
    head = reader.read(session_id, tenant=TENANT)
    assert head is not None
    applied = [r.request_id for r in head.applied]
    assert applied.count(f"req-{session_id}") == 1
    assert applied.count(wake_request_id(TENANT, session_id, call_id)) == 1
    assert backends.waits.records(TENANT, session_id) == []
    assert backends.marks.get(TENANT, session_id) is None
    assert wake_due(_rt(backends, "w4"), at_ms=FAR_MS) == 0  # nothing left to wake


def _parked_call_ids(backends: Backends, session_id: str) -> list[str]:
    view = backends.runs.get(nap_request(session_id).ref)
    assert view is not None and view.result is not None
    assert view.result.status is RunStatus.WAITING, view.result
    return [p.call_id for p in view.result.pending if p.wait_for is not None]


@pytest.mark.parametrize(("step", "phase"), EVERY_CRASH_POINT, ids=lambda v: str(v))
def test_a_suspend_crashed_at_every_step_parks_once_and_wakes_once(
    make_backends: Callable[[], Backends], step: CommitStep, phase: str
) -> None:
    backends = make_backends()
    session_id = f"s-sus-{step}-{phase}"
    request = nap_request(session_id)
    switch = PowerSwitch()
    submit(backends.runs, request)
    with crash_at(step, phase, "w1", switch) as fired, pytest.raises(SimulatedCrash):
        drain(_rt(backends, "w1", switch), TENANT, session_id)
    assert fired, f"the suspend never reached {phase} {step}"
    _recover(backends, session_id)
    assert wake_due(_rt(backends, "w2"), at_ms=FAR_MS) == 1  # indexed once, whatever died where
    drain(_rt(backends, "w2"), TENANT, session_id)
    _check_woken_once(backends, session_id)


@pytest.mark.parametrize(("step", "phase"), EVERY_CRASH_POINT, ids=lambda v: str(v))
def test_a_wake_crashed_at_every_step_is_applied_once(
    make_backends: Callable[[], Backends], step: CommitStep, phase: str
) -> None:
    backends = make_backends()
    session_id = f"s-wake-{step}-{phase}"
    request = nap_request(session_id)
    submit(backends.runs, request)
    drain(_rt(backends, "w0"), TENANT, session_id)
    assert wake_due(_rt(backends, "w0"), at_ms=FAR_MS) == 1
    switch = PowerSwitch()
    with crash_at(step, phase, "w1", switch) as fired, pytest.raises(SimulatedCrash):
        drain(_rt(backends, "w1", switch), TENANT, session_id)
    assert fired, f"the wake never reached {phase} {step}"
    _recover(backends, session_id)
    for record in backends.waits.records(TENANT, session_id):  # a sweeper submits it again
        backends.waits.park([record])
        wake_due(_rt(backends, "w2"), at_ms=FAR_MS)
        drain(_rt(backends, "w2"), TENANT, session_id)
    _check_woken_once(backends, session_id)
