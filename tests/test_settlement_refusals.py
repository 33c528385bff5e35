"""#29 N3 and item 6: only pending calls can be settled, and a refused settlement changes nothing.

A call waiting for approval is approved or rejected, never answered with an invented output; a
call waiting for an output (a ``Waiting`` tool) is answered, never approved; a call that has its
result is settled by nothing. A refused approval, rejection or answer (twice, an unknown call,
a session of another tenant) fails with ``InvalidInput`` naming the tenant, and creates no
session, saves no head and publishes no event (today's ``SESSION_RESTORED`` of a rollback).
In-process, on the worker's cycle with memory backends (the same cycle real workers run).
"""

from __future__ import annotations

import pytest

from tests.support.approval_agents import approver_agent
from tests.support.crash import (
    TENANT,
    Backends,
    PowerSwitch,
    SimulatedCrash,
    memory_backends,
    request_for,
    worker_runtime,
)
from tether import Agent, AgentOptions, ModelResponse, ScriptedModel, SessionLogReader, tool
from tether.core.results import Resolution, RunStatus
from tether.errors import InvalidInput
from tether.runs.contract import RunRequest, RunResult
from tether.runs.queue.base import submit
from tether.runtime.registry import AgentRegistry
from tether.runtime.session import AgentSession
from tether.runtime.tools import Waiting
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices


@tool
def slow_job() -> Waiting:
    """Start a job whose output arrives later."""
    return Waiting(output="job started; its output comes later")


def waiter_agent() -> Agent:
    """Calls ``slow_job`` (which waits for an output from outside), then answers with it."""
    model = ScriptedModel(
        [ModelResponse.call("job-1", "slow_job"), ModelResponse.final("job done")]
    )
    return Agent(model, "scripted-waiter", tools=[slow_job], name="waiter")


def unchanged(session: AgentSession) -> tuple[object, ...]:
    return (session.memory_snapshot(), len(session.events), session.last_seq)


def test_only_a_pending_call_can_be_settled_in_process() -> None:
    session = approver_agent().new_session("local")
    call_id = session.run("transfer 3").pending[0].call_id
    before = unchanged(session)
    with pytest.raises(InvalidInput, match="waits for a person's approval"):
        session.submit_tool_output(call_id, "transferred 1000000")  # invented, tool never ran
    with pytest.raises(InvalidInput, match="unknown"):
        session.approve("call_nope")
    with pytest.raises(InvalidInput, match="settled twice"):
        session.resolve([Resolution(call_id=call_id, action="approve")] * 2)
    assert unchanged(session) == before

    session.approve(call_id)
    settled = unchanged(session)
    with pytest.raises(InvalidInput, match="not pending"):
        session.submit_tool_output(call_id, "rewritten")  # a completed result stays
    with pytest.raises(InvalidInput, match="not pending"):
        session.reject(call_id, "too late")
    assert unchanged(session) == settled

    waiting = waiter_agent().new_session("job")
    assert waiting.run("go").status is RunStatus.WAITING
    before = unchanged(waiting)
    for settle in (waiting.approve, lambda c: waiting.reject(c, "no")):
        with pytest.raises(InvalidInput, match="does not wait for approval but for an output"):
            settle("job-1")
    assert unchanged(waiting) == before
    waiting.submit_tool_output("job-1", "ok")
    assert waiting.run(None).output == "job done"


def apply(backends: Backends, request: RunRequest) -> RunResult:
    registry = AgentRegistry({"approver": approver_agent})
    rt = worker_runtime(backends, "w1", registry=registry)
    submit(rt.runs, request)
    drain(rt, request.tenant, request.session_id)
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None
    return view.result


def ask(session_id: str, text: str) -> RunRequest:
    return request_for(session_id, text).model_copy(update={"agent": "approver"})


def settle(session_id: str, *resolutions: Resolution, tenant: str = TENANT) -> RunRequest:
    return ask(session_id, "x").model_copy(
        update={"input": None, "resolutions": resolutions, "tenant": tenant}
    )


def state(backends: Backends, session_id: str, tenant: str = TENANT) -> tuple[object, ...]:
    """What a refusal must leave alone: the head, the archive's events, the published stream."""
    reader = SessionLogReader(backends.store, backends.archive)
    head = backends.store.load(tenant, session_id)
    return (
        None if head is None else head.version,
        [e.seq for e in reader.events(session_id, tenant=tenant)] if head else [],
        [(e.seq, e.type) for e in backends.stream.read(tenant, session_id)],
    )


def test_a_worker_refuses_an_invented_output_for_a_call_waiting_for_approval() -> None:
    backends = memory_backends()
    call_id = apply(backends, ask("s-inv", "transfer 7")).pending[0].call_id
    before = state(backends, "s-inv")
    invented = apply(backends, settle("s-inv", Resolution(call_id=call_id, action="output")))
    assert invented.status is RunStatus.FAILED and invented.error_type == "InvalidInput"
    assert "waits for a person's approval" in (invented.error_message or "")
    assert state(backends, "s-inv") == before


def test_a_refused_settlement_creates_nothing_and_appends_nothing() -> None:
    backends = memory_backends()
    call_id = apply(backends, ask("s-ref", "transfer 7")).pending[0].call_id
    approved = apply(backends, settle("s-ref", Resolution(call_id=call_id, action="approve")))
    assert approved.status is RunStatus.COMPLETED
    settled = state(backends, "s-ref")
    refusals = [
        settle("s-ref", Resolution(call_id=call_id, action="approve")),  # twice
        settle("s-ref", Resolution(call_id="call_nope", action="reject", text="no")),  # unknown
    ]
    for request in refusals:
        refused = apply(backends, request)
        assert refused.status is RunStatus.FAILED and refused.error_type == "InvalidInput"
        assert f"{TENANT}/s-ref" in (refused.error_message or "")
    assert state(backends, "s-ref") == settled

    # another tenant's producer settling "its" s-ref: no such session there, and none is made
    other = apply(backends, settle("s-ref", Resolution(call_id=call_id, action="approve"),
                                   tenant="globex"))  # fmt: skip
    assert other.status is RunStatus.FAILED and "globex/s-ref" in (other.error_message or "")
    assert backends.store.load("globex", "s-ref") is None
    assert backends.stream.read("globex", "s-ref") == []
    assert state(backends, "s-ref") == settled


def test_an_approved_call_stays_settled_when_its_continuation_is_cancelled() -> None:
    """The approved tool runs as the continuation settles the call; a cancel (or a rollback
    for the user's next message) of that continuation rolled the settlement back with the
    rest, so the call was pending again and a second approval ran the tool again, under the
    second continuation's key: two transfers for one request. The settlement now outlives the
    rollback: the second approval is refused and the tool ran once."""
    effects: list[str] = []
    holder: dict[str, object] = {}

    @tool
    def transfer(amount: int) -> str:
        """Transfer money (needs approval); asks for the continuation to stop as it runs."""
        effects.append(f"transfer {amount}")
        rt, ref = holder["rt"], holder["ref"]
        rt.runs.request_cancel(ref)  # type: ignore[attr-defined]
        return f"transferred {amount}"

    @tool
    def note(text: str) -> str:
        """Take a note."""
        return text

    def agent() -> Agent:
        model = ScriptedModel(
            [
                ModelResponse.call("call_t", "transfer", '{"amount": 5}'),
                ModelResponse.call("call_n", "note", '{"text": "paid"}'),  # a step boundary
                ModelResponse.final("ok"),
            ]
        )
        options = AgentOptions(require_approval=frozenset({"transfer"}))
        return Agent(model, "scripted", tools=[transfer, note], name="payer", options=options)

    backends = memory_backends()
    rt = worker_runtime(backends, "w1", registry=AgentRegistry({"payer": agent}))
    first = request_for("s-pay", "pay 5").model_copy(update={"agent": "payer"})
    submit(rt.runs, first)
    drain(rt, TENANT, "s-pay")
    approve = Resolution(call_id="call_t", action="approve")
    continuation = first.model_copy(
        update={"run_id": "run-cont-1", "request_id": "run-cont-1", "input": None,
                "resolutions": (approve,)}
    )  # fmt: skip
    holder.update(rt=rt, ref=continuation.ref)
    submit(rt.runs, continuation)
    drain(rt, TENANT, "s-pay")
    view = backends.runs.get(continuation.ref)
    assert view is not None and view.result is not None
    assert view.result.status is RunStatus.CANCELLED
    assert effects == ["transfer 5"]

    again = continuation.model_copy(update={"run_id": "run-cont-2", "request_id": "run-cont-2"})
    submit(rt.runs, again)
    drain(rt, TENANT, "s-pay")
    refused = backends.runs.get(again.ref)
    assert refused is not None and refused.result is not None
    assert refused.result.error_type == "InvalidInput" and "not pending" in (
        refused.result.error_message or ""
    )
    assert effects == ["transfer 5"]  # once
    report = SessionLogReader(backends.store, backends.archive).verify("s-pay", tenant=TENANT)
    assert report.ok, report.problems


def test_a_resumed_continuation_keeps_its_settlement_when_it_is_cancelled() -> None:
    """The same, when the continuation's worker died after the approved tool ran (its
    checkpoint holds the settlement) and another worker resumed it: the resumed run's rollback
    point is after its settlements too."""
    effects: list[str] = []
    switch = PowerSwitch()
    holder: dict[str, object] = {}

    @tool
    def transfer(amount: int) -> str:
        """Transfer money (needs approval)."""
        effects.append(f"transfer {amount}")
        return f"transferred {amount}"

    @tool
    def note(text: str) -> str:
        """Take a note: the first worker dies in it; on the resumed attempt it asks to stop."""
        if not switch.dead:
            switch.dead = True
            raise SimulatedCrash("worker died in the note")
        rt, ref = holder["rt"], holder["ref"]
        rt.runs.request_cancel(ref)  # type: ignore[attr-defined]
        return text

    script = [
        ModelResponse.call("call_t", "transfer", '{"amount": 5}'),
        ModelResponse.call("call_n", "note", '{"text": "paid"}'),
        ModelResponse.final("ok"),
    ]
    model = ScriptedModel(script)  # one script for both workers: the resumed run goes on

    def agent() -> Agent:
        options = AgentOptions(require_approval=frozenset({"transfer"}))
        return Agent(model, "scripted", tools=[transfer, note], name="payer", options=options)

    backends = memory_backends()
    registry = AgentRegistry({"payer": agent})
    dying = worker_runtime(backends, "w1", switch=switch, registry=registry)
    continuation = _approval_sent(dying, "s-pay-2", "run-cont-a")
    with pytest.raises(SimulatedCrash):
        drain(dying, TENANT, "s-pay-2")
    backends.expire_lease(TENANT, "s-pay-2")
    taker = worker_runtime(backends, "w2", registry=registry)
    holder.update(rt=taker, ref=continuation.ref)
    submit(taker.runs, continuation)  # redelivered
    drain(taker, TENANT, "s-pay-2")
    view = backends.runs.get(continuation.ref)
    assert view is not None and view.result is not None
    assert view.result.status is RunStatus.CANCELLED and view.result.attempts == 2
    again = continuation.model_copy(update={"run_id": "run-cont-b", "request_id": "run-cont-b"})
    submit(taker.runs, again)
    drain(taker, TENANT, "s-pay-2")
    refused = backends.runs.get(again.ref)
    assert refused is not None and refused.result is not None
    assert refused.result.error_type == "InvalidInput"
    assert effects == ["transfer 5"]


def test_an_approved_call_is_not_run_again_when_its_worker_dies_right_after_it() -> None:
    """With step durability, the continuation runs the approved tool as it settles the call;
    the loop's first checkpoint came only once its first step had chosen its tool calls, so a
    worker dying in between (in the model call after the settlement) left no checkpoint, and
    the next attempt settled the call again: the tool ran twice (under one key: a tool that
    deduplicates was safe, one that does not was not). The settlement is checkpointed now."""
    effects: list[str] = []
    switch = PowerSwitch()

    @tool
    def transfer(amount: int) -> str:
        """Transfer money (needs approval); counts every call, deduplicating nothing."""
        effects.append(f"transfer {amount}")
        return f"transferred {amount}"

    def respond(request: object) -> ModelResponse:
        items = getattr(request, "items", ())
        if any(getattr(i, "type", None) == "tool_output" for i in items):
            if not switch.dead:  # the first worker dies as it asks the model after the transfer
                switch.dead = True
                raise SimulatedCrash("worker died in the model call after the approved tool")
            return ModelResponse.final("paid")
        return ModelResponse.call("call_t", "transfer", '{"amount": 5}')

    def agent() -> Agent:
        options = AgentOptions(require_approval=frozenset({"transfer"}), durability="step")
        model = ScriptedModel(responder=respond)  # type: ignore[arg-type]
        return Agent(model, "scripted", tools=[transfer], name="payer", options=options)

    backends = memory_backends()
    registry = AgentRegistry({"payer": agent})
    rt = worker_runtime(backends, "w1", switch=switch, registry=registry)
    continuation = _approval_sent(rt, "s-pay", "run-cont")
    with pytest.raises(SimulatedCrash):
        drain(rt, TENANT, "s-pay")
    assert effects == ["transfer 5"]
    backends.expire_lease(TENANT, "s-pay")

    taker = worker_runtime(backends, "w2", registry=registry)
    submit(taker.runs, continuation)  # the broker redelivers the message
    drain(taker, TENANT, "s-pay")

    view = backends.runs.get(continuation.ref)
    assert view is not None and view.result is not None
    assert view.result.status is RunStatus.COMPLETED and view.result.output == "paid"
    assert effects == ["transfer 5"]  # once
    report = SessionLogReader(backends.store, backends.archive).verify("s-pay", tenant=TENANT)
    assert report.ok, report.problems


def test_approving_in_a_session_that_holds_nothing_says_so() -> None:
    """``tether approve nosuchsess call_1`` said the call was unknown in that session, as if
    the session existed: a mistyped session id should read as one."""
    session = approver_agent().new_session("nosuchsess")
    with pytest.raises(
        InvalidInput, match=r"session default/nosuchsess holds nothing.*sessions list"
    ):
        session.approve("call_1")
    with pytest.raises(InvalidInput, match="'call_9' is unknown in session default/local"):
        used = approver_agent().new_session("local")
        used.run("transfer 3")
        used.approve("call_9")


def _approval_sent(rt: EngineServices, session_id: str, run_id: str) -> RunRequest:
    """Run ``pay 5`` on the ``payer`` agent until it waits for approval of ``call_t``, then
    submit its approval as run ``run_id``; the continuation, submitted, not drained."""
    first = request_for(session_id, "pay 5").model_copy(update={"agent": "payer"})
    submit(rt.runs, first)
    drain(rt, TENANT, session_id)
    approve = Resolution(call_id="call_t", action="approve")
    continuation = first.model_copy(
        update={"run_id": run_id, "request_id": run_id, "input": None, "resolutions": (approve,)}
    )
    submit(rt.runs, continuation)
    return continuation
