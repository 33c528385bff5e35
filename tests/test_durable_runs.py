"""Step durability: a run cut short resumes at its last checkpoint on another worker.

In-process, with the real drain cycle on in-memory backends (and once on redis-server + S3 over
HTTP): a 10-step run whose tool counts outside Tether dies in its 7th tool call; the next worker
resumes it. The model is asked 11 times in all (not 7 + 11), the counter ends at 10 (the call cut
short is invoked again with the same idempotency key and deduplicated), and the session folds to
its stored memory with a gapless history. With ``durability="run"`` the same crash redoes the run.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.crash import (
    TENANT,
    Backends,
    PowerSwitch,
    SimulatedCrash,
    memory_backends,
    request_for,
    worker_runtime,
)
from tests.support.durable_agents import STEPS, MemoryCounter, counting_agent
from tether import SessionLogReader
from tether.core.events import EventType
from tether.errors import FencedOut
from tether.runs.contract import RunRequest
from tether.runs.queue.base import submit
from tether.runtime.options import Durability
from tether.runtime.registry import AgentRegistry
from tether.worker.engine.checkpoints.base import Checkpoint
from tether.worker.engine.cycle import drain
from tether.worker.engine.resume import resume_point


def registry_for(
    counter: MemoryCounter, durability: Durability, crash_at: int | None, switch: PowerSwitch | None
) -> AgentRegistry:
    def before_apply(n: int) -> None:
        if crash_at is not None and n == crash_at and switch is not None and not switch.dead:
            switch.dead = True
            raise SimulatedCrash(f"worker died in tool call {n}")

    registry = AgentRegistry({})
    registry.register(
        "counter",
        lambda: counting_agent(counter, durability=durability, before_apply=before_apply),
    )
    return registry


def counting_request(session_id: str, durability: Durability | None = None) -> RunRequest:
    request = request_for(session_id, "count to ten")
    return request.model_copy(update={"agent": "counter", "durability": durability})


def die_in_call(
    backends: Backends,
    counter: MemoryCounter,
    request: RunRequest,
    durability: Durability,
    crash_at: int,
) -> None:
    """Apply ``request`` on a worker that dies in its ``crash_at``-th tool call; its lease
    expires, as a dead worker's does."""
    switch = PowerSwitch()
    dying = worker_runtime(
        backends,
        "w1",
        switch=switch,
        registry=registry_for(counter, durability, crash_at, switch),
    )
    submit(dying.runs, request)
    with pytest.raises(SimulatedCrash):
        drain(dying, TENANT, request.session_id)
    backends.expire_lease(TENANT, request.session_id)


def crash_then_resume(
    backends: Backends, durability: Durability, crash_at: int = 7
) -> tuple[MemoryCounter, RunRequest]:
    counter = MemoryCounter()
    request = counting_request("s-durable")
    die_in_call(backends, counter, request, durability, crash_at)
    taker = worker_runtime(backends, "w2", registry=registry_for(counter, durability, None, None))
    submit(taker.runs, request)  # the broker redelivers the message
    drain(taker, TENANT, request.session_id)
    return counter, request


def assert_committed_once(backends: Backends, request: RunRequest) -> None:
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None
    assert view.result.status == "COMPLETED" and view.result.output == f"counted {STEPS}"
    assert view.result.attempts == 2
    reader = SessionLogReader(backends.store, backends.archive)
    report = reader.verify(request.session_id, tenant=TENANT)
    assert report.ok, report.problems
    head = reader.read(request.session_id, tenant=TENANT)
    assert head is not None
    assert [r.request_id for r in head.applied] == [request.request_id]
    assert backends.checkpoints.load(TENANT, request.session_id, request.run_id) is None


def test_step_durability_resumes_without_redoing_steps_or_tool_calls() -> None:
    backends = memory_backends()
    counter, request = crash_then_resume(backends, "step")
    assert counter.total == STEPS  # every increment applied exactly once
    assert counter.model_calls == STEPS + 1  # 7 before the crash, 4 after: not 7 + 11
    # the call cut short was invoked again with the same key; no other call ran twice
    assert sorted(counter.invocations.values()) == [1] * (STEPS - 1) + [2]
    assert_committed_once(backends, request)
    history = SessionLogReader(backends.store, backends.archive).events(
        request.session_id, tenant=TENANT
    )
    results = [e for e in history if e.type is EventType.TOOL_RESULT]
    assert len(results) == STEPS  # one recorded result per call in the committed history


def test_run_durability_redoes_the_run() -> None:
    backends = memory_backends()
    counter, request = crash_then_resume(backends, "run")
    assert counter.model_calls == 7 + STEPS + 1
    # fresh model call ids on the redo, but the keys come from run, step and position (#29):
    # the tool deduplicates the 6 calls it had already applied (before: 6 + STEPS effects)
    assert counter.total == STEPS
    assert_committed_once(backends, request)


def test_request_durability_overrides_the_agent() -> None:
    backends = memory_backends()
    counter = MemoryCounter()
    request = counting_request("s-override", durability="run")
    rt = worker_runtime(backends, "w1", registry=registry_for(counter, "step", None, None))
    saved: list[Checkpoint] = []
    original = backends.checkpoints.save
    backends.checkpoints.save = lambda t, s, c: (saved.append(c), original(t, s, c))[1]
    submit(rt.runs, request)
    drain(rt, TENANT, request.session_id)
    assert saved == []
    step_request = counting_request("s-override-2")
    submit(rt.runs, step_request)
    drain(rt, TENANT, step_request.session_id)
    # calls recorded + result for each of the 10 tool steps; a step's end adds only its
    # STEP_END, which the result's checkpoint covers (a resumed run closes the step again)
    assert len(saved) == 2 * STEPS


@pytest.mark.parametrize("crash_at", [1, 4, 10])
def test_resume_from_any_step(crash_at: int) -> None:
    backends = memory_backends()
    counter, request = crash_then_resume(backends, "step", crash_at=crash_at)
    assert counter.total == STEPS
    assert counter.model_calls == STEPS + 1
    assert_committed_once(backends, request)


def test_resume_on_real_redis_and_s3(make_backends: Callable[[], Backends]) -> None:
    backends = make_backends()
    counter, request = crash_then_resume(backends, "step")
    assert (counter.total, counter.model_calls) == (STEPS, STEPS + 1)
    assert_committed_once(backends, request)


def die_in_step_seven(backends: Backends, counter: MemoryCounter, request: RunRequest) -> None:
    """A step-durable run whose worker dies in its seventh tool call, after checkpoints."""
    switch = PowerSwitch()
    dying = worker_runtime(
        backends, "w1", switch=switch, registry=registry_for(counter, "step", 7, switch)
    )
    submit(dying.runs, request)
    with pytest.raises(SimulatedCrash):
        drain(dying, TENANT, request.session_id)


def test_a_lost_stream_falls_back_to_redoing_the_run() -> None:
    backends = memory_backends()
    counter = MemoryCounter()
    request = counting_request("s-lost")
    die_in_step_seven(backends, counter, request)
    backends.stream.trim(TENANT, request.session_id, max_len=0)  # Redis lost the run's events
    backends.expire_lease(TENANT, request.session_id)
    taker = worker_runtime(backends, "w2", registry=registry_for(counter, "step", None, None))
    drain(taker, TENANT, request.session_id)
    assert counter.model_calls == 7 + STEPS + 1  # redone from the head, not resumed
    assert_committed_once(backends, request)


def test_a_zombie_cannot_checkpoint_after_a_takeover() -> None:
    backends = memory_backends()
    first = backends.leases.acquire(TENANT, "s-zombie", "w1", 60_000)
    assert first is not None
    backends.expire_lease(TENANT, "s-zombie")
    second = backends.leases.acquire(TENANT, "s-zombie", "w2", 60_000)
    assert second is not None and second.fence > first.fence
    backends.checkpoints.save(
        TENANT, "s-zombie", Checkpoint(run_id="r1", fence=second.fence, base_seq=0, last_seq=5)
    )
    with pytest.raises(FencedOut):
        backends.checkpoints.save(
            TENANT, "s-zombie", Checkpoint(run_id="r1", fence=first.fence, base_seq=0, last_seq=9)
        )
    kept = backends.checkpoints.load(TENANT, "s-zombie", "r1")
    assert kept is not None and kept.last_seq == 5


def test_a_checkpoint_replays_only_events_its_own_run_wrote() -> None:
    """#29 item 9: the events a checkpoint covers are replayed only when the run that saved it
    wrote them; events another run wrote at those places (a stream rebuilt out of band) make
    the run start over from the head instead of replaying a stranger's memory."""
    backends = memory_backends()
    counter = MemoryCounter()
    request = counting_request("s-replay")
    die_in_step_seven(backends, counter, request)
    taker = worker_runtime(backends, "w2", registry=registry_for(counter, "step", None, None))
    agent = taker.registry.get("counter")
    assert resume_point(taker, agent, request, None) is not None  # its own events: resumed

    events = backends.stream.read(TENANT, request.session_id)
    assert {e.run_id for e in events} == {request.run_id} and len(events) > 2
    backends.expire_lease(TENANT, request.session_id)
    lease = backends.leases.acquire(TENANT, request.session_id, "rebuilder", 60_000)
    assert lease is not None
    backends.stream.trim(TENANT, request.session_id, max_len=0)
    intruder = [e.model_copy(update={"run_id": "run-intruder"}) for e in events[:2]]
    backends.stream.append(TENANT, request.session_id, [*intruder, *events[2:]], lease.fence)
    assert resume_point(taker, agent, request, None) is None  # not replayed: starts over
    assert backends.checkpoints.load(TENANT, request.session_id, request.run_id) is None


def test_a_run_resumes_on_a_session_that_already_had_runs() -> None:
    """The drain publishes the restore of the head it loaded (``SESSION_RESTORED``, no run id)
    just before a run's first event, inside what the run's checkpoints cover; resuming read it
    as another run's event and started over: every step asked the model again. Resuming works
    on a session's first run and on any later one alike."""
    backends = memory_backends()
    counter = MemoryCounter()
    earlier = request_for("s-durable", "hello").model_copy(update={"agent": "echo"})
    first = worker_runtime(backends, "w0")
    submit(first.runs, earlier)
    drain(first, TENANT, earlier.session_id)
    backends.expire_lease(TENANT, earlier.session_id)  # the next worker loads the stored head
    request = counting_request("s-durable")
    die_in_call(backends, counter, request, "step", 7)
    taker = worker_runtime(backends, "w2", registry=registry_for(counter, "step", None, None))
    submit(taker.runs, request)
    drain(taker, TENANT, request.session_id)
    assert counter.model_calls == STEPS + 1  # resumed at its checkpoint: not 7 + 11
    assert counter.total == STEPS
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None and view.result.attempts == 2
    report = SessionLogReader(backends.store, backends.archive).verify(
        request.session_id, tenant=TENANT
    )
    assert report.ok, report.problems


def test_a_run_out_of_attempts_leaves_nothing_of_its_steps_to_the_next_run() -> None:
    """A run cut short after its checkpoints, then refused for lack of attempts, left the
    session replayed at its checkpoint in the drain, and the next queued run went on from
    there: the failed run's input and steps in the next run's memory, under the next run's
    name. The next run starts from the committed head."""
    backends = memory_backends()
    counter = MemoryCounter()
    doomed = counting_request("s-budget")
    die_in_call(backends, counter, doomed, "step", 4)
    after = request_for("s-budget", "next").model_copy(update={"agent": "counter"})
    taker = worker_runtime(backends, "w2", registry=registry_for(counter, "step", None, None))
    taker.settings = taker.settings.model_copy(update={"max_attempts": 1})  # none left for it
    submit(taker.runs, doomed)
    submit(taker.runs, after)
    drain(taker, TENANT, doomed.session_id)
    failed = backends.runs.get(doomed.ref)
    assert failed is not None and failed.result is not None
    assert failed.result.error_type == "RetriesExhausted"
    done = backends.runs.get(after.ref)
    assert done is not None and done.result is not None
    assert done.result.output == f"counted {STEPS}"  # its own ten steps, not the doomed run's
    head = SessionLogReader(backends.store, backends.archive).read("s-budget", tenant=TENANT)
    assert head is not None
    inputs = [i.content for i in head.memory.items if getattr(i, "type", "") == "user_message"]
    assert inputs == ["next"]  # nothing of the doomed run
