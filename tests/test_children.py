"""Child runs, in-process on the engine: a parent's tool spawns children (``ctx.spawn``) and
parks on them (``ctx.wait``); each child's end is recorded for its parent, the parent is woken
once (all, any, a timeout), a failed child is a result the model reads, a cancelled parent
cancels its children (not the detached ones), and spawns over the tenant's limits are refused
naming them with nothing written. Memory backends and redis-server + S3 over HTTP."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.child_agents import child_agent, parent_agent
from tests.support.crash import FAR_MS, TENANT, Backends, session_request, worker_runtime
from tether import SessionLogReader
from tether.core.events import now_ms
from tether.core.results import RunStatus
from tether.core.waits import ChildRef
from tether.producer.waits import cancel_requests
from tether.runs.contract import RunRequest, RunResult
from tether.runs.queue.base import submit
from tether.runs.waits.base import wake_request_id, wake_run_id
from tether.runs.waits.children import Family
from tether.runtime.registry import AgentRegistry
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices
from tether.worker.engine.wakes import wake_due


def rt(backends: Backends, worker_id: str = "w1", **settings: Any) -> EngineServices:
    registry = AgentRegistry({"parent": parent_agent, "child": child_agent})
    services = worker_runtime(backends, worker_id, registry=registry)
    if settings:
        services = dataclasses.replace(
            services, settings=services.settings.model_copy(update=settings)
        )
    return services


def fan(session_id: str, text: str) -> RunRequest:
    return session_request(session_id, "parent", text)


def result_of(backends: Backends, session_id: str, run_id: str) -> RunResult:
    view = backends.runs.get(fan(session_id, "").ref._replace(run_id=run_id))
    assert view is not None and view.result is not None, run_id
    return view.result


def children_of(backends: Backends, session_id: str) -> tuple[str, tuple[ChildRef, ...]]:
    """The parent's call parked on children, and the children."""
    waiting = result_of(backends, session_id, f"run-{session_id}")
    assert waiting.status is RunStatus.WAITING, waiting
    (pending,) = waiting.pending
    assert pending.wait_for is not None and pending.wait_for.kind == "children"
    return pending.call_id, pending.wait_for.children


def woken(backends: Backends, session_id: str, call_id: str) -> RunResult:
    return result_of(backends, session_id, wake_run_id(TENANT, session_id, call_id))


def applied_count(backends: Backends, session_id: str, request_id: str) -> int:
    head = SessionLogReader(backends.store, backends.archive).read(session_id, tenant=TENANT)
    assert head is not None
    return [r.request_id for r in head.applied].count(request_id)


def tool_output(result: RunResult) -> dict[str, Any]:
    assert result.output is not None and result.output.startswith("children: "), result.output
    body: dict[str, Any] = json.loads(result.output.removeprefix("children: "))
    return body


def start(backends: Backends, services: EngineServices, session_id: str, text: str) -> None:
    submit(backends.runs, fan(session_id, text))
    drain(services, TENANT, session_id)


def test_a_parent_waits_for_all_its_children_and_goes_on_once(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    w = rt(backends)
    start(backends, w, "p-all", "fan 3")
    call_id, children = children_of(backends, "p-all")
    assert len(children) == 3 and len({c.session_id for c in children}) == 3
    for i, child in enumerate(children):
        assert child.session_id.startswith("p-all.c-")
        drain(w, TENANT, child.session_id)
        assert result_of(backends, child.session_id, child.run_id).status is RunStatus.COMPLETED
        wake = backends.runs.get(
            fan("p-all", "").ref._replace(run_id=wake_run_id(TENANT, "p-all", call_id))
        )
        assert (wake is not None) == (i == 2)  # the last child's end wakes the parent
    drain(w, TENANT, "p-all")
    done = woken(backends, "p-all", call_id)
    assert done.status is RunStatus.COMPLETED, done
    body = tool_output(done)
    assert body["done"] == body["total"] == 3 and body["timed_out"] is False
    assert [c["output"] for c in body["children"]] == [f"answer: topic-{i}" for i in range(3)]
    assert applied_count(backends, "p-all", wake_request_id(TENANT, "p-all", call_id)) == 1
    assert backends.waits.records(TENANT, "p-all") == []
    assert backends.children.family(TENANT, "p-all") == Family({}, {})  # nothing waits on them
    child_request = backends.runs.get(
        fan(children[0].session_id, "").ref._replace(run_id=children[0].run_id)
    )
    assert child_request is not None and child_request.request is not None
    parent = child_request.request.parent
    assert parent is not None and (parent.session_id, parent.depth) == ("p-all", 1)
    report = SessionLogReader(backends.store, backends.archive).verify("p-all", tenant=TENANT)
    assert report.ok, report.problems


def test_mode_any_wakes_the_parent_at_the_first_child_once(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    w = rt(backends)
    start(backends, w, "p-any", "fan 3 any")
    call_id, children = children_of(backends, "p-any")
    drain(w, TENANT, children[1].session_id)
    drain(w, TENANT, "p-any")
    body = tool_output(woken(backends, "p-any", call_id))
    assert body["done"] == 1 and body["mode"] == "any"
    assert [c["status"] for c in body["children"]] == ["IN_PROGRESS", "COMPLETED", "IN_PROGRESS"]
    family = backends.children.family(TENANT, "p-any")
    assert set(family.spawned) == {children[0].run_id, children[2].run_id}  # still running
    assert family.ended == {}
    for child in (children[0], children[2]):  # later ends wake nothing more
        drain(w, TENANT, child.session_id)
    drain(w, TENANT, "p-any")
    assert applied_count(backends, "p-any", wake_request_id(TENANT, "p-any", call_id)) == 1
    assert backends.children.family(TENANT, "p-any") == Family({}, {})  # each end forgotten


def test_a_failed_child_is_a_result_the_parent_reads(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    w = rt(backends)
    start(backends, w, "p-fail", "fan 2 input fail now")
    call_id, children = children_of(backends, "p-fail")
    for child in children:
        drain(w, TENANT, child.session_id)
        assert result_of(backends, child.session_id, child.run_id).status is RunStatus.FAILED
    drain(w, TENANT, "p-fail")
    done = woken(backends, "p-fail", call_id)
    assert done.status is RunStatus.COMPLETED  # the parent did not fail
    body = tool_output(done)
    assert [c["status"] for c in body["children"]] == ["FAILED", "FAILED"]
    assert "told to fail" in body["children"][0]["error"]["message"]


def test_a_timeout_wakes_the_parent_with_what_ended(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    w = rt(backends)
    start(backends, w, "p-late", "fan 2 timeout 30 input nap 600")
    call_id, children = children_of(backends, "p-late")
    for child in children:
        drain(w, TENANT, child.session_id)  # each sleeps: WAITING, not ended
    assert wake_due(w, at_ms=FAR_MS) >= 1  # the parent's timeout (and the children's timers)
    drain(w, TENANT, "p-late")
    body = tool_output(woken(backends, "p-late", call_id))
    assert body["timed_out"] is True and body["done"] == 0


def _cancel(backends: Backends, w: EngineServices, session_id: str) -> None:
    """What ``Producer.cancel`` does to a parked run: a continuation cancels its calls."""
    view = backends.runs.get(fan(session_id, "").ref)
    for request in cancel_requests(view, None):
        submit(backends.runs, request)
    drain(w, TENANT, session_id)


@pytest.mark.parametrize("detached", [False, True])
def test_cancelling_the_parent_cancels_its_children_unless_detached(
    make_backends: Callable[[], Backends], detached: bool
) -> None:
    backends = make_backends()
    w = rt(backends)
    sid = f"p-cancel-{detached}"
    start(backends, w, sid, f"fan 2 {'detached ' if detached else ''}input nap 600")
    call_id, children = children_of(backends, sid)
    for child in children:
        drain(w, TENANT, child.session_id)
    _cancel(backends, w, sid)
    assert woken(backends, sid, call_id).status is RunStatus.CANCELLED
    for child in children:
        drain(w, TENANT, child.session_id)
        (pending,) = result_of(backends, child.session_id, child.run_id).pending
        wake = backends.runs.get(
            fan(child.session_id, "").ref._replace(
                run_id=wake_run_id(TENANT, child.session_id, pending.call_id)
            )
        )
        if detached:
            assert wake is None  # still asleep
            assert len(backends.waits.records(TENANT, child.session_id)) == 1
        else:
            assert wake is not None and wake.result is not None
            assert wake.result.status is RunStatus.CANCELLED
            assert backends.waits.records(TENANT, child.session_id) == []


def test_spawns_beyond_the_limits_are_refused_naming_them(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    shallow = rt(backends, max_child_depth=0)
    start(backends, shallow, "p-deep", "fan 1")
    done = result_of(backends, "p-deep", "run-p-deep")
    assert done.status is RunStatus.COMPLETED  # the call failed; the model read why
    assert done.output is not None and "TETHER_MAX_CHILD_DEPTH" in done.output
    assert backends.children.family(TENANT, "p-deep").spawned == {}
    few = rt(backends, max_children_per_run=2)
    start(backends, few, "p-many", "fan 3")
    done = result_of(backends, "p-many", "run-p-many")
    assert done.output is not None and "TETHER_MAX_CHILDREN_PER_RUN" in done.output
    assert backends.children.family(TENANT, "p-many").spawned == {}  # the call failed: none


def test_a_tenant_sets_lower_limits_than_the_fleet(make_backends: Callable[[], Backends]) -> None:
    backends = make_backends()
    policy = json.dumps({TENANT: {"max_children_per_run": 1}})
    w = rt(backends, tenant_budgets=policy)
    start(backends, w, "p-tenant", "fan 2")
    done = result_of(backends, "p-tenant", "run-p-tenant")
    assert done.output is not None and f"max_children_per_run of tenant '{TENANT}'" in done.output


def test_spawn_in_process_fails_the_call_saying_it_needs_the_fleet() -> None:
    session = parent_agent().new_session()
    result = session.run("fan 1")
    assert result.status is RunStatus.COMPLETED
    assert result.output is not None and "ctx.spawn needs the fleet" in result.output


def test_a_childs_run_span_is_below_its_parents_run_span() -> None:
    from tests.support.crash import memory_backends
    from tests.support.otel_spans import memory_exporter

    exporter = memory_exporter()
    backends = memory_backends()
    w = rt(backends)
    start(backends, w, "p-trace", "fan 1")
    _, (child,) = children_of(backends, "p-trace")
    drain(w, TENANT, child.session_id)
    runs = {
        s.attributes["tether.session_id"]: s
        for s in exporter.get_finished_spans()
        if s.name == "tether.run" and s.attributes is not None
    }
    parent, spawned = runs["p-trace"], runs[child.session_id]
    assert spawned.parent is not None and parent.context is not None
    assert spawned.context is not None and spawned.context.trace_id == parent.context.trace_id
    assert spawned.parent.span_id == parent.context.span_id


def test_a_parent_waits_through_a_redis_flush(make_backends: Callable[[], Backends]) -> None:
    """Redis loses the wait records and the family records (the index, not the queue): the
    reconcile parks the parent's wait again from its head, finds the end of the child that
    ended before in that child's head, and the last child's end, vouched for by the parent's
    own wait, wakes it."""
    from tether.worker.engine.wait_reconcile import reconcile_waits

    backends = make_backends()
    w = rt(backends)
    start(backends, w, "p-flush", "fan 2")
    call_id, children = children_of(backends, "p-flush")
    drain(w, TENANT, children[0].session_id)
    _lose_the_index(backends, ["p-flush", *(c.session_id for c in children)])
    assert reconcile_waits(w).rebuilt == 1
    drain(w, TENANT, children[1].session_id)
    drain(w, TENANT, "p-flush")
    body = tool_output(woken(backends, "p-flush", call_id))
    assert [c["output"] for c in body["children"]] == ["answer: topic-0", "answer: topic-1"]


def test_a_sleeping_child_finds_its_parent_after_a_redis_flush(
    make_backends: Callable[[], Backends],
) -> None:
    """The child ends in a continuation (it slept on a timer), whose request names no parent:
    its head does (``tether.parent``), and the parent's wait, parked again from its head,
    vouches for it."""
    from tether.worker.engine.wait_reconcile import reconcile_waits

    backends = make_backends()
    w = rt(backends)
    start(backends, w, "p-nap", "fan 1 input nap 5")
    call_id, (child,) = children_of(backends, "p-nap")
    drain(w, TENANT, child.session_id)  # the child parks on its timer
    assert result_of(backends, child.session_id, child.run_id).status is RunStatus.WAITING
    _lose_the_index(backends, ["p-nap", child.session_id])
    assert reconcile_waits(w).rebuilt == 2
    assert wake_due(w, at_ms=now_ms() + 10_000) == 1
    drain(w, TENANT, child.session_id)
    drain(w, TENANT, "p-nap")
    body = tool_output(woken(backends, "p-nap", call_id))
    assert [c["status"] for c in body["children"]] == ["COMPLETED"]
    assert body["children"][0]["output"].startswith("woke: ")
    assert backends.children.family(TENANT, "p-nap") == Family({}, {})


def _lose_the_index(backends: Backends, sessions: list[str]) -> None:
    if backends.name == "memory":
        backends.waits.clear()
        backends.children.clear()
        return
    client, keys = backends.waits._client, backends.waits._keys
    for sid in sessions:
        client.delete(keys.session_waits(TENANT, sid), keys.session_waits(TENANT, sid, "family"))
    client.delete(*keys.timer_shards())
