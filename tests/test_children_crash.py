"""Crash a parent's spawn, and a child's completion, at every named commit step (before and
after each), recover the way other workers would, and check: every child runs once, the parent
is woken once and goes on with every child's result, nothing stays parked, and the sessions'
logs verify. Memory backends and redis-server + S3 over HTTP."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest

from tests.support.child_agents import child_agent, parent_agent
from tests.support.crash import (
    EVERY_CRASH_POINT,
    TENANT,
    Backends,
    PowerSwitch,
    SimulatedCrash,
    crash_at,
    worker_runtime,
)
from tests.test_children import (
    applied_count,
    children_of,
    fan,
    result_of,
    rt,
    tool_output,
    woken,
)
from tether import SessionLogReader
from tether.core.events import now_ms
from tether.core.waits import ChildRef
from tether.runs.queue.base import submit
from tether.runs.waits.base import wake_request_id
from tether.runs.waits.children import Family
from tether.runtime.registry import AgentRegistry
from tether.worker.engine.commit import CommitStep
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices
from tether.worker.engine.wakes import wake_due

#: Steps a run that ends with a commit of its own takes (the lease release: the drain's).
TAKEN = frozenset(CommitStep) - {CommitStep.LEASE_RELEASE, CommitStep.CHECKPOINT_CLEAR}


def _powered(backends: Backends, worker_id: str, switch: PowerSwitch) -> EngineServices:
    registry = AgentRegistry({"parent": parent_agent, "child": child_agent})
    return worker_runtime(backends, worker_id, switch=switch, registry=registry)


def _crashed_drain(
    backends: Backends, session_id: str, step: CommitStep, phase: str, taken: frozenset[CommitStep]
) -> None:
    switch = PowerSwitch()
    with (
        crash_at(step, phase, "w1", switch) as fired,  # type: ignore[arg-type]
        contextlib.suppress(SimulatedCrash),
    ):
        drain(_powered(backends, "w1", switch), TENANT, session_id)
    if step in taken:
        assert fired, f"the run never reached {phase} {step}"


def _recover(backends: Backends, session_id: str) -> None:
    """The lease expires; the broker and the sweeper bring the session to two more workers."""
    backends.expire_lease(TENANT, session_id)
    drain(rt(backends, "w2"), TENANT, session_id)
    drain(rt(backends, "w3"), TENANT, session_id)


def _check_family(
    backends: Backends, session_id: str, call_id: str, children: tuple[ChildRef, ...]
) -> None:
    """Each child applied once, the parent woken once with every child's answer."""
    reader = SessionLogReader(backends.store, backends.archive)
    for child in children:
        head = reader.read(child.session_id, tenant=TENANT)
        assert head is not None
        assert [r.request_id for r in head.applied].count(child.run_id.removeprefix("run-")) == 1
        report = reader.verify(child.session_id, tenant=TENANT)
        assert report.ok, report.problems
    body = tool_output(woken(backends, session_id, call_id))
    assert [c["status"] for c in body["children"]] == ["COMPLETED"] * len(children)
    assert applied_count(backends, session_id, wake_request_id(TENANT, session_id, call_id)) == 1
    assert applied_count(backends, session_id, f"req-{session_id}") == 1
    assert backends.waits.records(TENANT, session_id) == []
    assert backends.children.family(TENANT, session_id) == Family({}, {})  # forgotten
    report = reader.verify(session_id, tenant=TENANT)
    assert report.ok, report.problems


@pytest.mark.parametrize(("step", "phase"), EVERY_CRASH_POINT, ids=lambda v: str(v))
def test_a_spawn_crashed_at_every_step_runs_each_child_once(
    make_backends: Callable[[], Backends], step: CommitStep, phase: str
) -> None:
    backends = make_backends()
    sid = f"p-spawn-{step}-{phase}"
    submit(backends.runs, fan(sid, "fan 3"))
    _crashed_drain(backends, sid, step, phase, TAKEN)
    _recover(backends, sid)
    call_id, children = children_of(backends, sid)
    for child in children:
        drain(rt(backends, "w4"), TENANT, child.session_id)
    drain(rt(backends, "w4"), TENANT, sid)
    _check_family(backends, sid, call_id, children)


@pytest.mark.parametrize(("step", "phase"), EVERY_CRASH_POINT, ids=lambda v: str(v))
def test_a_child_completion_crashed_at_every_step_wakes_the_parent_once(
    make_backends: Callable[[], Backends], step: CommitStep, phase: str
) -> None:
    backends = make_backends()
    sid = f"p-end-{step}-{phase}"
    submit(backends.runs, fan(sid, "fan 2"))
    drain(rt(backends, "w0"), TENANT, sid)
    call_id, children = children_of(backends, sid)
    drain(rt(backends, "w0"), TENANT, children[0].session_id)
    # a child that does not park takes no wait step
    taken = TAKEN - {CommitStep.WAIT_MARK, CommitStep.WAIT_INDEX}
    _crashed_drain(backends, children[1].session_id, step, phase, taken)
    _recover(backends, children[1].session_id)
    drain(rt(backends, "w4"), TENANT, sid)
    _check_family(backends, sid, call_id, children)


@pytest.mark.parametrize(("step", "phase"), EVERY_CRASH_POINT, ids=lambda v: str(v))
def test_a_sleeping_childs_wake_crashed_at_every_step_wakes_the_parent_once(
    make_backends: Callable[[], Backends], step: CommitStep, phase: str
) -> None:
    """The child ends in the continuation its timer woke (its request names no parent: its
    head does), crashed at each step, then finished or redone by other workers."""
    backends = make_backends()
    sid = f"p-nap-{step}-{phase}"
    submit(backends.runs, fan(sid, "fan 2 input nap 5"))
    drain(rt(backends, "w0"), TENANT, sid)
    call_id, children = children_of(backends, sid)
    for child in children:  # both park on their timers
        drain(rt(backends, "w0"), TENANT, child.session_id)
    assert wake_due(rt(backends, "w0"), at_ms=now_ms() + 10_000) == 2
    drain(rt(backends, "w0"), TENANT, children[0].session_id)
    _crashed_drain(backends, children[1].session_id, step, phase, TAKEN)
    _recover(backends, children[1].session_id)
    drain(rt(backends, "w4"), TENANT, sid)
    _check_family(backends, sid, call_id, children)
    for child in children:  # each child's timer woke it once
        (parked,) = result_of(backends, child.session_id, child.run_id).pending
        wake = wake_request_id(TENANT, child.session_id, parked.call_id)
        assert applied_count(backends, child.session_id, wake) == 1
