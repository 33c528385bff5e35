"""Rerun from a step, in-process: the real drain cycle on in-memory backends.

A 10-step run (``tests/support/durable_agents.py``: its tool and model count outside Tether)
is forked before step 4 with a rerun mark (:mod:`tether.runs.rerun`), and the request the mark
names is drained on the fork: the worker goes on at step 4 from the recorded steps. Also when
the worker dies inside the rerun's third tool call: the next one resumes from its checkpoint,
and still nothing of steps 0..3 runs again. The real-worker variant is in
``test_replay_workers.py``.
"""

from __future__ import annotations

import pytest

from tests.support.crash import (
    TENANT,
    Backends,
    PowerSwitch,
    SimulatedCrash,
    memory_backends,
    worker_runtime,
)
from tests.support.durable_agents import STEPS, MemoryCounter
from tests.test_durable_runs import counting_request, registry_for
from tether import SessionLogReader
from tether.core.events import EventType
from tether.core.results import RunStatus
from tether.producer.ops.rerun import boundary_before
from tether.runs.contract import RunRequest
from tether.runs.queue.base import submit
from tether.runs.rerun import RERUN_ATTRIBUTE, RerunMark
from tether.runtime.replay_recording import recorded_run
from tether.worker.engine.cycle import drain

FROM_STEP = 4


def original_and_fork(backends: Backends, counter: MemoryCounter) -> tuple[RunRequest, RunRequest]:
    """Run the 10-step request on ``s-src``, fork it before step 4; the rerun's request."""
    original = counting_request("s-src")
    worker = worker_runtime(backends, "w0", registry=registry_for(counter, "step", None, None))
    submit(worker.runs, original)
    drain(worker, TENANT, original.session_id)
    reader = SessionLogReader(backends.store, backends.archive)
    history = reader.events(original.session_id, tenant=TENANT)
    at = boundary_before(recorded_run(history, original.run_id, where="s-src"), FROM_STEP)
    mark = RerunMark(
        source_session_id="s-src",
        source_run_id=original.run_id,
        from_step=FROM_STEP,
        request_id="req-rerun",
    )
    attributes = {RERUN_ATTRIBUTE: mark.model_dump(mode="json")}
    reader.fork("s-src", "s-fork", tenant=TENANT, at_seq=at, attributes=attributes)
    rerun = counting_request("s-fork").model_copy(
        update={"request_id": mark.request_id, "run_id": "run-rerun"}
    )
    return original, rerun


def check_rerun(backends: Backends, rerun: RunRequest, attempts: int) -> None:
    view = backends.runs.get(rerun.ref)
    assert view is not None and view.result is not None
    result = view.result
    assert result.status is RunStatus.COMPLETED and result.output == f"counted {STEPS}"
    assert result.attempts == attempts
    reader = SessionLogReader(backends.store, backends.archive)
    assert reader.verify("s-fork", tenant=TENANT).ok
    events = reader.events("s-fork", tenant=TENANT)
    mine = [e for e in events if e.run_id == rerun.run_id]
    assert [e.step for e in mine if e.type is EventType.STEP_START] == list(
        range(FROM_STEP, STEPS + 1)
    )
    # the committed result covers the kept steps too: every call of the run, in order
    assert result.first_seq == next(e.seq for e in events if e.run_id is not None)
    assert len([e for e in events if e.type is EventType.TOOL_RESULT]) == STEPS


def test_a_rerun_goes_on_at_its_step_without_redoing_earlier_model_or_tool_calls() -> None:
    backends, counter = memory_backends(), MemoryCounter()
    _, rerun = original_and_fork(backends, counter)
    assert (counter.model_calls, counter.total) == (STEPS + 1, STEPS)
    worker = worker_runtime(backends, "w1", registry=registry_for(counter, "step", None, None))

    submit(worker.runs, rerun)
    drain(worker, TENANT, rerun.session_id)

    check_rerun(backends, rerun, attempts=1)
    # steps 4..10 asked the model again, and steps 4..9 called the tool (new keys): nothing else
    assert counter.model_calls == (STEPS + 1) + (STEPS + 1 - FROM_STEP)
    assert counter.total == STEPS + (STEPS - FROM_STEP)
    assert set(counter.invocations.values()) == {1}


def test_a_worker_dying_inside_a_rerun_resumes_it_from_its_checkpoint() -> None:
    backends, counter = memory_backends(), MemoryCounter()
    _, rerun = original_and_fork(backends, counter)
    switch = PowerSwitch()
    crash_at = STEPS + 3  # the rerun's third tool call (step 6); the counter counts them all
    dying = worker_runtime(
        backends, "w1", switch=switch, registry=registry_for(counter, "step", crash_at, switch)
    )
    submit(dying.runs, rerun)
    with pytest.raises(SimulatedCrash):
        drain(dying, TENANT, rerun.session_id)
    backends.expire_lease(TENANT, rerun.session_id)
    taker = worker_runtime(backends, "w2", registry=registry_for(counter, "step", None, None))

    submit(taker.runs, rerun)  # the broker redelivers the message
    drain(taker, TENANT, rerun.session_id)

    check_rerun(backends, rerun, attempts=2)
    assert counter.model_calls == (STEPS + 1) + (STEPS + 1 - FROM_STEP)  # none asked twice
    assert counter.total == STEPS + (STEPS - FROM_STEP)
    # only the call cut short ran twice (same idempotency key, deduplicated by the tool)
    assert sorted(counter.invocations.values()) == [1] * (2 * STEPS - FROM_STEP - 1) + [2]


def test_the_source_session_is_not_written_and_another_request_runs_as_usual() -> None:
    backends, counter = memory_backends(), MemoryCounter()
    original, _ = original_and_fork(backends, counter)
    source = backends.store.load(TENANT, original.session_id)
    other = counting_request("s-fork")  # not the marked request: starts at step 0
    worker = worker_runtime(backends, "w1", registry=registry_for(counter, "step", None, None))

    submit(worker.runs, other)
    drain(worker, TENANT, other.session_id)

    after = backends.store.load(TENANT, original.session_id)
    assert source is not None and after is not None and after.version == source.version
    events = SessionLogReader(backends.store, backends.archive).events("s-fork", tenant=TENANT)
    mine = [e for e in events if e.run_id == other.run_id]
    assert mine[0].type is EventType.USER_INPUT and mine[1].step == 0
