"""Human in the loop: a run waits for approval, and a continuation settles it (in-process cycle)."""

from __future__ import annotations

import pytest

from tests.support import approval_agents
from tests.support.approval_agents import approver_agent
from tests.support.crash import TENANT, Backends, memory_backends, request_for, worker_runtime
from tether import SessionLogReader
from tether.core.events import EventType
from tether.core.items import ToolOutput
from tether.core.results import Resolution, RunStatus
from tether.errors import InvalidInput
from tether.runs.contract import RunRequest, RunResult, parse_request
from tether.runs.queue.base import submit
from tether.runtime.registry import AgentRegistry
from tether.worker.engine.cycle import drain


def apply(backends: Backends, request: RunRequest, worker_id: str = "w1") -> RunResult:
    registry = AgentRegistry({"approver": approver_agent})
    rt = worker_runtime(backends, worker_id, registry=registry)
    submit(rt.runs, request)
    drain(rt, TENANT, request.session_id)
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None
    return view.result


def ask(session_id: str, text: str) -> RunRequest:
    return request_for(session_id, text).model_copy(update={"agent": "approver"})


def settle(session_id: str, *resolutions: Resolution) -> RunRequest:
    return ask(session_id, "x").model_copy(update={"input": None, "resolutions": resolutions})


def test_a_call_needing_approval_parks_the_run_with_its_pending_call() -> None:
    backends = memory_backends()
    before = len(approval_agents.TRANSFERS)
    waiting = apply(backends, ask("s-hitl", "transfer 100"))
    assert waiting.status is RunStatus.WAITING
    assert [(p.tool, p.arguments, p.reason) for p in waiting.pending] == [
        ("transfer", '{"amount": 100}', "approval")
    ]
    assert len(approval_agents.TRANSFERS) == before  # nothing ran
    assert SessionLogReader(backends.store, backends.archive).verify("s-hitl", tenant=TENANT).ok


def test_approving_runs_the_tool_once_and_the_run_goes_on() -> None:
    backends = memory_backends()
    waiting = apply(backends, ask("s-approve", "transfer 5"))
    call_id = waiting.pending[0].call_id
    before = len(approval_agents.TRANSFERS)
    done = apply(backends, settle("s-approve", Resolution(call_id=call_id, action="approve")), "w2")
    assert done.status is RunStatus.COMPLETED and done.output == "done: transferred 5"
    assert len(approval_agents.TRANSFERS) == before + 1
    reader = SessionLogReader(backends.store, backends.archive)
    assert reader.verify("s-approve", tenant=TENANT).ok
    replaced = [
        e
        for e in reader.events("s-approve", tenant=TENANT)
        if e.type is EventType.TOOL_OUTPUT_REPLACED
    ]
    assert [(e.run_id, e.payload.output) for e in replaced] == [  # type: ignore[union-attr]
        (done.run_id, "transferred 5")
    ]
    head = reader.read("s-approve", tenant=TENANT)
    assert head is not None
    outputs = [i.output for i in head.memory.items if isinstance(i, ToolOutput)]
    assert outputs == ["transferred 5"]


def test_rejecting_tells_the_model_why_and_runs_nothing() -> None:
    backends = memory_backends()
    waiting = apply(backends, ask("s-reject", "transfer 9"))
    before = len(approval_agents.TRANSFERS)
    resolution = Resolution(call_id=waiting.pending[0].call_id, action="reject", text="too much")
    done = apply(backends, settle("s-reject", resolution))
    assert done.status is RunStatus.COMPLETED
    assert done.output is not None and "too much" in done.output and "Rejected" in done.output
    assert len(approval_agents.TRANSFERS) == before


def test_settling_an_unknown_or_settled_call_fails_and_changes_nothing() -> None:
    backends = memory_backends()
    waiting = apply(backends, ask("s-twice", "transfer 1"))
    call_id = waiting.pending[0].call_id
    apply(backends, settle("s-twice", Resolution(call_id=call_id, action="approve")))
    reader = SessionLogReader(backends.store, backends.archive)
    memory_before = reader.project("s-twice", tenant=TENANT)
    again = apply(backends, settle("s-twice", Resolution(call_id=call_id, action="approve")))
    assert again.status is RunStatus.FAILED and again.error_type == "InvalidInput"
    unknown = apply(backends, settle("s-twice", Resolution(call_id="nope", action="output")))
    assert unknown.status is RunStatus.FAILED and "unknown" in (unknown.error_message or "")
    assert reader.project("s-twice", tenant=TENANT) == memory_before
    assert reader.verify("s-twice", tenant=TENANT).ok


def test_a_continuation_takes_no_input() -> None:
    doc = ask("s", "hello").model_dump(mode="json")
    doc["resolutions"] = [{"call_id": "c1", "action": "approve"}]
    with pytest.raises(InvalidInput, match="takes no input"):
        parse_request(doc)


def test_in_process_sessions_approve_directly() -> None:
    session = approver_agent().new_session("local")
    waiting = session.run("transfer 3")
    assert waiting.status is RunStatus.WAITING
    session.approve(waiting.pending[0].call_id)
    assert session.run(None).output == "done: transferred 3"
