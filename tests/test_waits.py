"""Calls parked on the fleet, in-process: ``ctx.sleep`` and the ``wait`` tool park a run, the
wait rides on the session (events, snapshots, fold), the worker's commit records it, a sweeper's
wake goes on with the run once, and a cancel ends it. The same engine tests run on memory
backends and on redis-server + S3 over HTTP (``make_backends``)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import redis

from tests.support.crash import FAR_MS, TENANT, Backends, nap_request, worker_runtime
from tests.support.wait_agents import sleeper_agent, waiter_agent
from tether import SessionLogReader
from tether.core.events import EventType, ToolResultPayload
from tether.core.items import ToolOutput
from tether.core.results import Resolution, RunStatus
from tether.core.waits import WaitFor
from tether.keys import RedisKeys
from tether.observability.timed_waits import TimedWaitsCollector, read_timed_waits
from tether.persistence.codec import dumps_event, dumps_snapshot, loads_event, loads_snapshot
from tether.runs.contract import RunRequest
from tether.runs.queue.base import submit
from tether.runs.waits.base import (
    TimerMember,
    WaitRecord,
    waiting_reason,
    wake_request_id,
    wake_run_id,
)
from tether.runs.waits.redis import RedisWaitIndex
from tether.runtime.registry import AgentRegistry
from tether.runtime.timers import wait_limit
from tether.runtime.waiting import parked_calls
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices
from tether.worker.engine.wakes import wake_due


def test_a_sleeping_tool_parks_the_run_with_its_wait_in_memory_and_events() -> None:
    session = sleeper_agent().new_session()
    result = session.run("nap 5")
    assert result.status is RunStatus.WAITING
    (pending,) = result.pending
    assert pending.wait_for is not None and pending.wait_for.kind == "timer"
    parked = parked_calls(session.memory_snapshot().items)
    assert parked == {pending.call_id: pending.wait_for}
    (event,) = [e for e in session.events if e.type is EventType.TOOL_RESULT]
    assert event.v == 5 and isinstance(event.payload, ToolResultPayload)
    assert loads_event(dumps_event(event)) == event  # the wait survives the codec
    restored = sleeper_agent().new_session()
    restored.restore(loads_snapshot(dumps_snapshot(session.snapshot())))
    assert parked_calls(restored.memory_snapshot().items) == parked
    session.submit_tool_output(pending.call_id, "done sleeping")
    assert parked_calls(session.memory_snapshot().items) == {}
    assert session.run(None).output == "woke: done sleeping"


def test_an_event_without_a_wait_keeps_its_older_version() -> None:
    session = sleeper_agent().new_session()
    session.run("nap 1")
    session.submit_tool_output(session.memory_snapshot().items[-1].call_id, "x")  # type: ignore[union-attr]
    replaced = [e for e in session.events if e.type is EventType.TOOL_OUTPUT_REPLACED]
    assert replaced and all(e.v == 1 for e in replaced)


def test_a_sleep_beyond_the_longest_wait_fails_the_call_naming_the_limit() -> None:
    session = sleeper_agent().new_session()
    with wait_limit(10, "TETHER_MAX_WAIT_S"):
        result = session.run("nap 20")
    assert result.status is RunStatus.COMPLETED  # the model saw the refusal and answered
    outputs = [i.output for i in session.memory_snapshot().items if isinstance(i, ToolOutput)]
    assert "TETHER_MAX_WAIT_S" in outputs[0] and "10 s" in outputs[0]
    assert parked_calls(session.memory_snapshot().items) == {}


def test_the_model_waits_with_the_opt_in_wait_tool() -> None:
    session = waiter_agent().new_session()
    result = session.run("wait 30")
    (pending,) = result.pending
    assert pending.tool == "wait" and pending.wait_for is not None
    assert "wait" in waiter_agent().tools.names()
    assert "wait" not in sleeper_agent().tools.names()  # opt-in


def test_a_wait_for_checks_its_kind() -> None:
    with pytest.raises(ValueError, match="due_at_ms"):
        WaitFor(kind="timer")
    with pytest.raises(ValueError, match="name"):
        WaitFor(kind="signal")


def _runtime(backends: Backends, worker_id: str = "w1") -> EngineServices:
    registry = AgentRegistry({"sleeper": sleeper_agent, "waiter": waiter_agent})
    return worker_runtime(backends, worker_id, registry=registry)


def _apply(rt: EngineServices, request: RunRequest) -> None:
    submit(rt.runs, request)
    drain(rt, request.tenant, request.session_id)


def test_a_parked_run_is_woken_once_and_goes_on(make_backends: Callable[[], Backends]) -> None:
    backends = make_backends()
    rt = _runtime(backends)
    request = nap_request("s-wake")
    _apply(rt, request)
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None
    assert view.result.status is RunStatus.WAITING
    (pending,) = view.result.pending
    member = TimerMember(TENANT, "s-wake", pending.call_id)
    assert backends.waits.get_many([member])[0] is not None
    assert backends.marks.get(TENANT, "s-wake") is not None
    assert wake_due(rt, at_ms=FAR_MS) == 1
    assert wake_due(_runtime(backends, "w2"), at_ms=FAR_MS) == 0  # taken: another sweeper gets none
    drain(rt, TENANT, "s-wake")
    woke = backends.runs.get(
        request.ref._replace(run_id=wake_run_id(TENANT, "s-wake", pending.call_id))
    )
    assert woke is not None and woke.result is not None
    assert woke.result.status is RunStatus.COMPLETED
    assert woke.result.output is not None and "slept_until" in woke.result.output
    assert backends.waits.get_many([member]) == [None]
    assert backends.marks.get(TENANT, "s-wake") is None
    report = SessionLogReader(backends.store, backends.archive).verify("s-wake", tenant=TENANT)
    assert report.ok, report.problems


def test_a_wake_submitted_twice_applies_once(make_backends: Callable[[], Backends]) -> None:
    backends = make_backends()
    rt = _runtime(backends)
    _apply(rt, nap_request("s-twice"))
    (record,) = backends.waits.records(TENANT, "s-twice")
    backends.waits.park([record])  # as if the sweeper died before dropping the member
    assert wake_due(rt, at_ms=FAR_MS) == 1
    backends.waits.park([record])
    assert wake_due(rt, at_ms=FAR_MS) == 0  # a duplicate of the same request id
    drain(rt, TENANT, "s-twice")
    head = SessionLogReader(backends.store, backends.archive).read("s-twice", tenant=TENANT)
    assert head is not None
    wake_id = wake_request_id(TENANT, "s-twice", record.call_id)
    assert [r.request_id for r in head.applied].count(wake_id) == 1


def test_cancelling_a_parked_call_ends_it_for_good(make_backends: Callable[[], Backends]) -> None:
    backends = make_backends()
    rt = _runtime(backends)
    _apply(rt, nap_request("s-cancel"))
    (record,) = backends.waits.records(TENANT, "s-cancel")
    cancel = RunRequest(
        run_id=wake_run_id(TENANT, "s-cancel", record.call_id),
        request_id=wake_request_id(TENANT, "s-cancel", record.call_id),
        tenant=TENANT,
        session_id="s-cancel",
        agent="sleeper",
        input=None,
        resolutions=(Resolution(call_id=record.call_id, action="cancel"),),
    )
    _apply(rt, cancel)
    view = backends.runs.get(cancel.ref)
    assert view is not None and view.result is not None
    assert view.result.status is RunStatus.CANCELLED
    assert backends.waits.records(TENANT, "s-cancel") == []
    assert wake_due(rt, at_ms=FAR_MS) == 0
    head = SessionLogReader(backends.store, backends.archive).read("s-cancel", tenant=TENANT)
    assert head is not None
    (output,) = [i for i in head.memory.items if isinstance(i, ToolOutput)]
    assert (
        output.wait_for is None
        and json.loads(output.output.split(": ", 1)[1])["errorType"] == "Cancelled"
    )


def test_a_tenants_own_longest_wait_is_named_when_lower(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    rt = _runtime(backends)
    rt.settings = rt.settings.model_copy(
        update={"tenant_budgets": json.dumps({TENANT: {"max_wait_s": 5}})}
    )
    _apply(rt, nap_request("s-tenant-limit", 10))
    view = backends.runs.get(nap_request("s-tenant-limit", 10).ref)
    assert view is not None and view.result is not None
    assert view.result.status is RunStatus.COMPLETED
    assert view.result.output is not None and "max_wait_s of tenant 'acme'" in view.result.output
    assert backends.waits.records(TENANT, "s-tenant-limit") == []
    assert backends.marks.get(TENANT, "s-tenant-limit") is None


def test_a_waiting_result_says_what_it_waits_for(make_backends: Callable[[], Backends]) -> None:
    backends = make_backends()
    rt = _runtime(backends)
    _apply(rt, nap_request("s-reason", 60))
    view = backends.runs.get(nap_request("s-reason", 60).ref)
    assert view is not None and view.result is not None
    reason = waiting_reason(view.result)
    assert reason is not None and reason.startswith("timer due 20") and reason.endswith("Z")
    assert waiting_reason(view.result.model_copy(update={"status": RunStatus.COMPLETED})) is None


def test_the_timed_waits_gauge_reads_the_index(redis_client: redis.Redis) -> None:
    keys = RedisKeys("gauge-test")
    index = RedisWaitIndex(redis_client, keys)
    assert read_timed_waits(redis_client, keys) == (0, None)
    for n, due in enumerate((5_000, 3_000, 9_000)):
        index.park(
            [
                WaitRecord(
                    tenant=TENANT,
                    session_id=f"s-{n}",
                    call_id="c",
                    run_id="r",
                    agent="sleeper",
                    wait_for=WaitFor(kind="timer", due_at_ms=due),
                )
            ]
        )
    assert read_timed_waits(redis_client, keys) == (3, 3_000)
    metrics = {
        m.name: m.samples[0].value for m in TimedWaitsCollector(redis_client, keys).collect()
    }
    assert metrics == {"tether_waits_timed": 3, "tether_waits_next_due_seconds": 3.0}
