"""A step's last tool result is checkpointed with the next step's model request.

The checkpoint after a step's last result is not written on its own: it goes with the run's next
append, the next step's ``MODEL_REQUEST``, before the model is asked (one write where there were
two). These runs die in the model call right after such a result, and at the boundary before it
(a warm shutdown's hand-back): the result's tool must not run again on the worker that resumes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from tests.support.crash import (
    TENANT,
    Backends,
    PowerSwitch,
    SimulatedCrash,
    request_for,
    worker_runtime,
)
from tests.support.durable_agents import STEPS, MemoryCounter, counting_agent
from tether.runs.contract import RunRequest
from tether.runs.queue.base import submit
from tether.runtime.agent import Agent
from tether.runtime.registry import AgentRegistry
from tether.worker.engine.cycle import drain

#: The model call the first worker dies in: the one after step 4's (the 5th) tool result.
CRASH_AT_MODEL_CALL = 6


def _registry(make: Callable[[], Agent]) -> AgentRegistry:
    registry = AgentRegistry({})
    registry.register("counter", make)
    return registry


def _dying_in_model_call(counter: MemoryCounter, switch: PowerSwitch) -> Agent:
    """The counting agent whose model dies when asked for the ``CRASH_AT_MODEL_CALL``-th time."""

    def die(n: int) -> None:
        if n == CRASH_AT_MODEL_CALL and not switch.dead:
            switch.dead = True
            raise SimulatedCrash("worker died while the model was asked")

    return counting_agent(counter, before_model=die)


def _resume(backends: Backends, counter: MemoryCounter, request: RunRequest) -> None:
    backends.expire_lease(TENANT, request.session_id)
    taker = worker_runtime(
        backends, "w2", registry=_registry(lambda: counting_agent(counter, durability="step"))
    )
    submit(taker.runs, request)  # the broker redelivers the message
    drain(taker, TENANT, request.session_id)


def _request(session_id: str) -> RunRequest:
    request = request_for(session_id, "count to ten")
    return request.model_copy(update={"agent": "counter", "durability": "step"})


def _assert_once(backends: Backends, counter: MemoryCounter, request: RunRequest) -> None:
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None
    assert view.result.status == "COMPLETED" and view.result.output == f"counted {STEPS}"
    assert counter.total == STEPS
    # no tool ran twice: the last result before the crash was checkpointed before the model call
    assert sorted(counter.invocations.values()) == [1] * STEPS


def test_a_crash_in_the_model_call_after_a_step_redoes_no_tool_call(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    counter = MemoryCounter()
    request = _request("s-deferred")
    switch = PowerSwitch()
    dying = worker_runtime(
        backends,
        "w1",
        switch=switch,
        registry=_registry(lambda: _dying_in_model_call(counter, switch)),
    )
    submit(dying.runs, request)
    with pytest.raises(SimulatedCrash):
        drain(dying, TENANT, request.session_id)
    _resume(backends, counter, request)
    _assert_once(backends, counter, request)
    # the dead call is asked again; none before it
    assert counter.model_calls == STEPS + 2


def test_a_hand_back_at_the_boundary_writes_the_deferred_checkpoint_first(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    counter = MemoryCounter()
    request = _request("s-handback")
    shutting_down = False

    def after_fourth(n: int) -> None:
        nonlocal shutting_down
        shutting_down = shutting_down or n == 4  # the shutdown starts in the 4th tool call

    leaving = worker_runtime(
        backends,
        "w1",
        registry=_registry(lambda: counting_agent(counter, before_apply=after_fourth)),
    )
    leaving = dataclasses.replace(leaving, draining=lambda: shutting_down)
    submit(leaving.runs, request)
    drain(leaving, TENANT, request.session_id)  # the run is handed back, not failed
    assert counter.total == 4 and counter.model_calls == 4
    _resume(backends, counter, request)
    _assert_once(backends, counter, request)
    assert counter.model_calls == STEPS + 1
