"""Redis losing the waits: flushed, or rolled back to before a wake (or to before a newer
wait). The sessions' heads and the durable marks beside them are the truth; reconcile rebuilds
the index from them, every sleeping run resumes once, and a wake the rollback forgot is not
applied twice. Memory backends
and redis-server + S3 over HTTP."""

from __future__ import annotations

from collections.abc import Callable

from tests.support.crash import FAR_MS, TENANT, Backends, nap_request, worker_runtime
from tests.support.signal_agents import listener_agent
from tests.support.wait_agents import sleeper_agent
from tether import SessionLogReader
from tether.core.events import now_ms
from tether.core.results import Resolution, RunStatus
from tether.runs.queue.base import submit
from tether.runs.waits.base import WaitRecord, settle_request, wake_request_id, wake_run_id
from tether.runs.waits.wakes import wake_request
from tether.runtime.registry import AgentRegistry
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices
from tether.worker.engine.wait_reconcile import reconcile_waits
from tether.worker.engine.wakes import wake_due

SESSIONS = [f"s-flush-{n}" for n in range(5)]


def _rt(backends: Backends, worker_id: str = "w1") -> EngineServices:
    return worker_runtime(backends, worker_id, registry=AgentRegistry({"sleeper": sleeper_agent}))


def _flush(backends: Backends) -> None:
    """Everything Redis held is gone (memory: the wait index is)."""
    if backends.name == "memory":
        backends.waits.clear()
    else:
        backends.runs.client.flushall()


def _sleep_all(backends: Backends) -> dict[str, str]:
    rt = _rt(backends)
    calls = {}
    for sid in SESSIONS:
        submit(rt.runs, nap_request(sid))
        drain(rt, TENANT, sid)
        (record,) = backends.waits.records(TENANT, sid)
        calls[sid] = record.call_id
    return calls


def _woken_once(backends: Backends, sid: str, call_id: str) -> None:
    reader = SessionLogReader(backends.store, backends.archive)
    report = reader.verify(sid, tenant=TENANT)
    assert report.ok, report.problems
    head = reader.read(sid, tenant=TENANT)
    assert head is not None
    applied = [r.request_id for r in head.applied]
    assert applied.count(wake_request_id(TENANT, sid, call_id)) == 1, applied
    assert head.applied[-1].status == RunStatus.COMPLETED.value
    assert backends.waits.records(TENANT, sid) == []
    assert backends.marks.get(TENANT, sid) is None


def test_a_flushed_redis_loses_no_timer(make_backends: Callable[[], Backends]) -> None:
    backends = make_backends()
    calls = _sleep_all(backends)
    _flush(backends)
    rt = _rt(backends, "w2")
    assert wake_due(rt, at_ms=FAR_MS) == 0  # the index is gone
    assert reconcile_waits(rt).rebuilt == len(SESSIONS)  # from the marks and the heads
    assert reconcile_waits(rt) == (0, 0)  # nothing more to do
    assert wake_due(rt, at_ms=FAR_MS) == len(SESSIONS)
    for sid in SESSIONS:
        drain(rt, TENANT, sid)
    for sid, call_id in calls.items():
        _woken_once(backends, sid, call_id)


def test_a_rolled_back_redis_wakes_nothing_twice(make_backends: Callable[[], Backends]) -> None:
    backends = make_backends()
    calls = _sleep_all(backends)
    before = {sid: backends.waits.records(TENANT, sid) for sid in SESSIONS}
    rt = _rt(backends)
    assert wake_due(rt, at_ms=FAR_MS) == len(SESSIONS)
    for sid in SESSIONS:
        drain(rt, TENANT, sid)
    # Redis goes back to before the wakes: the index and records are back, the wakes'
    # request ids and records are not
    if backends.name != "memory":
        backends.runs.client.flushall()
    for records in before.values():
        backends.waits.park(records)
    woken = wake_due(rt, at_ms=FAR_MS)
    for sid in SESSIONS:
        drain(rt, TENANT, sid)
    assert woken == (0 if backends.name == "memory" else len(SESSIONS))
    for sid, call_id in calls.items():
        _woken_once(backends, sid, call_id)  # the head knew the wake: finished as found
        view = backends.runs.get(
            nap_request(sid).ref._replace(run_id=wake_run_id(TENANT, sid, call_id))
        )
        assert view is not None and view.result is not None
        assert view.result.status is RunStatus.COMPLETED


def test_a_redis_gone_back_under_a_newer_wait_parks_that_one_again(
    make_backends: Callable[[], Backends],
) -> None:
    """Redis goes back to when the session waited on its first call; since then the head
    settled it and parked a second one. Redis has records (the first call's), so the pass
    that looks only for sessions without any finds nothing; the deep pass a rollback asks
    for compares them with the mark, and parks the second call again from the head."""
    backends = make_backends()
    rt = worker_runtime(backends, "w1", registry=AgentRegistry({"listener": listener_agent}))
    sid = "s-back"
    submit(
        rt.runs,
        nap_request(sid).model_copy(update={"agent": "listener", "input": "listen go 60 2"}),
    )
    drain(rt, TENANT, sid)
    (first,) = backends.waits.records(TENANT, sid)
    took = Resolution(call_id=first.call_id, action="output", text='{"signal": "go"}')
    submit(rt.runs, settle_request(TENANT, sid, "listener", took))
    drain(rt, TENANT, sid)
    (second,) = backends.waits.records(TENANT, sid)
    assert second.call_id != first.call_id
    backends.waits.settle(TENANT, sid, [second.call_id])  # what the rolled-back Redis holds
    backends.waits.park([first])
    assert reconcile_waits(rt) == (0, 0)
    assert reconcile_waits(rt, deep=True).rebuilt == 1
    # the first call's record, back with the older state, is forgotten: its head settled it
    assert [r.call_id for r in backends.waits.records(TENANT, sid)] == [second.call_id]
    assert reconcile_waits(rt, deep=True) == (0, 0)  # nothing more to do


def test_a_wake_between_the_head_read_and_the_park_leaves_no_record(
    make_backends: Callable[[], Backends],
) -> None:
    """Two workers rebuild after a flush: the other one parks first, finds the call due and its
    wake commits while this pass still holds the head it read before. The record this pass
    parks then names a call nobody will wake again: it reads the head once more and forgets it."""
    backends = make_backends()
    calls = _sleep_all(backends)
    sid = next(iter(calls))
    _flush(backends)
    rt, other = _rt(backends, "w2"), _rt(backends, "w3")
    marks = backends.marks.get(TENANT, sid)
    real_park = backends.waits.park

    def park_after_a_wake(records: list[WaitRecord]) -> None:
        if records and records[0].session_id == sid:
            submit(other.runs, wake_request(marks.records[0], now_ms()))
            drain(other, TENANT, sid)  # commits its head; it had no record to settle
        real_park(records)

    backends.waits.park = park_after_a_wake
    try:
        assert reconcile_waits(rt).rebuilt == len(SESSIONS)
    finally:
        del backends.waits.park
    assert backends.waits.records(TENANT, sid) == []
    assert wake_due(rt, at_ms=FAR_MS) == len(SESSIONS) - 1  # the others' timers, not its
    for other_sid in SESSIONS:
        drain(rt, TENANT, other_sid)
    for each_sid, each_call in calls.items():
        _woken_once(backends, each_sid, each_call)
