"""Crash a run that parks on a signal, and the wake that delivers it, at every named commit step
(before and after each), recover the way a second worker would, and check: the signal is
delivered once (the run's output holds it once, the session consumed it once), the wake is
applied once, nothing stays parked, and the session's log verifies. A crash between taking a
signal and committing the run gives it to the retried run, never twice. Memory backends and
redis-server + S3 over HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.support.crash import (
    EVERY_CRASH_POINT,
    TENANT,
    Backends,
    PowerSwitch,
    SimulatedCrash,
    crash_at,
    session_request,
    worker_runtime,
)
from tests.support.signal_agents import await_signal, listener_agent, respond_with
from tether import Agent, ModelResponse, ScriptedModel, SessionLogReader
from tether.core.events import now_ms
from tether.core.items import ToolOutput
from tether.core.results import RunStatus
from tether.models.base import ModelRequest
from tether.runs.contract import RunRequest
from tether.runs.queue.base import submit
from tether.runs.signals.base import signal_payload, wake_of
from tether.runtime.options import AgentOptions
from tether.runtime.registry import AgentRegistry
from tether.runtime.signals import CURSOR_KEY
from tether.worker.engine.commit import CommitStep
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices
from tether.worker.engine.wakes import wake_due


def _rt(backends: Backends, worker_id: str, switch: PowerSwitch | None = None) -> EngineServices:
    registry = AgentRegistry({"listener": listener_agent})
    return worker_runtime(backends, worker_id, switch=switch, registry=registry)


def _listen(session_id: str, count: int = 1) -> RunRequest:
    return session_request(session_id, "listener", f"listen go 600 {count}")


def _send(backends: Backends, session_id: str, payload: object) -> str:
    text = signal_payload("go", payload, max_bytes=10_000, redact=False)
    sent = backends.signals.send(TENANT, session_id, "go", text, sent_at_ms=now_ms())
    wake = wake_of(sent, "go")
    if wake is not None:
        submit(backends.runs, wake)
    return sent.signal_id


def _recover(backends: Backends, session_id: str) -> None:
    """The lease expires; the broker and the sweeper bring the session to two more workers."""
    backends.expire_lease(TENANT, session_id)
    drain(_rt(backends, "w2"), TENANT, session_id)
    drain(_rt(backends, "w3"), TENANT, session_id)


def _check_delivered_once(backends: Backends, session_id: str, payloads: list[object]) -> None:
    reader = SessionLogReader(backends.store, backends.archive)
    report = reader.verify(session_id, tenant=TENANT)
    assert report.ok, report.problems
    head = reader.read(session_id, tenant=TENANT)
    assert head is not None
    last = head.applied[-1]
    assert last.status == RunStatus.COMPLETED.value, last
    got = [json.loads(p)["payload"] for p in (last.output or "").removeprefix("got: ").split(" | ")]
    assert got == payloads
    applied = [r.request_id for r in head.applied]
    assert len(applied) == len(set(applied))  # each request applied once
    assert backends.waits.records(TENANT, session_id) == []
    assert wake_due(_rt(backends, "w4"), at_ms=now_ms()) == 0  # nothing left to wake
    assert head.metadata.attributes[CURSOR_KEY]


@pytest.mark.parametrize(("step", "phase"), EVERY_CRASH_POINT, ids=lambda v: str(v))
def test_a_suspend_on_a_signal_crashed_at_every_step_is_woken_once(
    make_backends: Callable[[], Backends], step: CommitStep, phase: str
) -> None:
    backends = make_backends()
    session_id = f"s-sus-{step}-{phase}"
    request = _listen(session_id)
    switch = PowerSwitch()
    submit(backends.runs, request)
    with crash_at(step, phase, "w1", switch) as fired, pytest.raises(SimulatedCrash):
        drain(_rt(backends, "w1", switch), TENANT, session_id)
    assert fired, f"the suspend never reached {phase} {step}"
    _recover(backends, session_id)
    _send(backends, session_id, "one")
    drain(_rt(backends, "w2"), TENANT, session_id)
    _check_delivered_once(backends, session_id, ["one"])


@pytest.mark.parametrize(("step", "phase"), EVERY_CRASH_POINT, ids=lambda v: str(v))
def test_a_signal_wake_crashed_at_every_step_delivers_once(
    make_backends: Callable[[], Backends], step: CommitStep, phase: str
) -> None:
    backends = make_backends()
    session_id = f"s-wake-{step}-{phase}"
    submit(backends.runs, _listen(session_id, count=2))
    drain(_rt(backends, "w0"), TENANT, session_id)
    _send(backends, session_id, "one")
    _send(backends, session_id, "two")  # sent before the second wait: taken by the wake's tool
    switch = PowerSwitch()
    with crash_at(step, phase, "w1", switch) as fired, pytest.raises(SimulatedCrash):
        drain(_rt(backends, "w1", switch), TENANT, session_id)
    assert fired, f"the wake never reached {phase} {step}"
    _recover(backends, session_id)
    head = SessionLogReader(backends.store, backends.archive).read(session_id, tenant=TENANT)
    assert head is not None
    wakes = [r for r in head.applied if r.request_id.startswith("wake-")]
    assert len(wakes) == 1
    _check_delivered_once(backends, session_id, ["one", "two"])


def _dying_listener(switch: PowerSwitch) -> AgentRegistry:
    """The listener, step-durable, whose worker dies in its model call after the first
    signal was taken (that step is checkpointed)."""
    respond = respond_with("await_signal")

    def dying(request: ModelRequest) -> ModelResponse:
        taken = [i for i in request.items if isinstance(i, ToolOutput)]
        if len(taken) == 1 and not switch.dead:
            switch.dead = True
            raise SimulatedCrash("worker died after the first signal was taken")
        return respond(request)  # type: ignore[no-any-return]

    def factory() -> Agent:
        options = AgentOptions(durability="step")
        model = ScriptedModel(responder=dying)
        return Agent(model, "scripted", tools=[await_signal], name="listener", options=options)

    return AgentRegistry({"listener": factory})


def test_a_run_resumed_from_its_step_checkpoint_never_takes_a_signal_twice(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    session_id = "s-resume"
    _send(backends, session_id, "one")
    _send(backends, session_id, "two")
    request = _listen(session_id, count=2)
    switch = PowerSwitch()
    dying = worker_runtime(backends, "w1", switch=switch, registry=_dying_listener(switch))
    submit(backends.runs, request)
    with pytest.raises(SimulatedCrash):
        drain(dying, TENANT, session_id)
    assert backends.checkpoints.load(TENANT, session_id, request.run_id) is not None
    _recover(backends, session_id)
    _check_delivered_once(backends, session_id, ["one", "two"])
