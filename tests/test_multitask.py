"""Multitask strategies: a second run races a running one on the same session.

The first run takes ten tool steps; during its third tool call another producer submits a second
run with a busy policy. ``enqueue`` runs it afterwards, ``reject`` refuses it, ``interrupt``
stops the first run at its next step boundary keeping its finished steps, ``rollback`` stops it
and discards them. Every session verifies (gapless history, fold == stored memory).
"""

from __future__ import annotations

from tests.support.crash import TENANT, Backends, memory_backends, request_for, worker_runtime
from tests.support.durable_agents import STEPS, MemoryCounter, counting_agent
from tether import SessionLogReader
from tether.core.events import EventType
from tether.core.items import ToolOutput, UserMessage
from tether.core.results import RunStatus
from tether.runs.contract import BusyPolicy, RunRequest, RunResult
from tether.runs.queue.base import SubmitState, preempt_for, submit
from tether.runtime.registry import AgentRegistry
from tether.worker.engine.cycle import drain


def race(policy: BusyPolicy) -> tuple[Backends, RunResult, RunRequest, SubmitState]:
    backends = memory_backends()
    counter = MemoryCounter()
    first = request_for("s-race", "count to ten").model_copy(update={"agent": "counter"})
    second = request_for("s-race", "count again").model_copy(
        update={"agent": "counter", "on_busy": policy}
    )
    outcome: list[SubmitState] = []

    def racing_producer(n: int) -> None:
        if n == 3 and not outcome:  # inside the first run's third tool call
            state = submit(backends.runs, second).state
            if state is SubmitState.QUEUED:
                preempt_for(backends.runs, second)
            outcome.append(state)

    registry = AgentRegistry({})
    registry.register("counter", lambda: counting_agent(counter, before_apply=racing_producer))
    rt = worker_runtime(backends, "w1", registry=registry)
    submit(rt.runs, first)
    drain(rt, TENANT, first.session_id)  # applies the first run, then whatever was queued
    view = backends.runs.get(first.ref)
    assert view is not None and view.result is not None
    report = SessionLogReader(backends.store, backends.archive).verify("s-race", tenant=TENANT)
    assert report.ok, report.problems
    return backends, view.result, second, outcome[0]


def result_of(backends: Backends, request: RunRequest) -> RunResult:
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None
    return view.result


def memory_of(backends: Backends) -> tuple[int, int]:
    head = SessionLogReader(backends.store, backends.archive).read("s-race", tenant=TENANT)
    assert head is not None
    items = head.memory.items
    return (
        sum(isinstance(i, UserMessage) for i in items),
        sum(isinstance(i, ToolOutput) for i in items),
    )


def test_enqueue_runs_the_second_after_the_first() -> None:
    backends, first, second, state = race(BusyPolicy.ENQUEUE)
    assert state is SubmitState.QUEUED
    assert first.status is RunStatus.COMPLETED and first.output == f"counted {STEPS}"
    assert result_of(backends, second).status is RunStatus.COMPLETED
    assert memory_of(backends) == (2, STEPS)


def test_reject_refuses_the_second_and_the_first_goes_on() -> None:
    backends, first, second, state = race(BusyPolicy.REJECT)
    assert state is SubmitState.BUSY
    assert first.status is RunStatus.COMPLETED
    assert backends.runs.get(second.ref) is None  # nothing was queued
    assert memory_of(backends) == (1, STEPS)


def test_interrupt_stops_the_first_at_a_step_boundary_keeping_its_steps() -> None:
    backends, first, second, state = race(BusyPolicy.INTERRUPT)
    assert state is SubmitState.QUEUED
    assert first.status is RunStatus.INTERRUPTED and first.ok
    assert first.error_type == "RunInterrupted"
    done = result_of(backends, second)
    assert done.status is RunStatus.COMPLETED and done.output == f"counted {STEPS}"
    # the first run's 3 finished steps stayed; the second added the remaining 7
    assert memory_of(backends) == (2, STEPS)
    history = SessionLogReader(backends.store, backends.archive).events("s-race", tenant=TENANT)
    first_results = [
        e for e in history if e.type is EventType.TOOL_RESULT and e.run_id == first.run_id
    ]
    assert len(first_results) == 3


def test_rollback_stops_the_first_and_discards_its_steps() -> None:
    backends, first, second, state = race(BusyPolicy.ROLLBACK)
    assert state is SubmitState.QUEUED
    assert first.status is RunStatus.CANCELLED
    done = result_of(backends, second)
    assert done.status is RunStatus.COMPLETED and done.output == f"counted {STEPS}"
    assert memory_of(backends) == (1, STEPS)  # nothing of the first run is left
