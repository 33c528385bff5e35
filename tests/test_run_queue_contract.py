"""Contract of :class:`tether.runs.queue.base.RunQueue`: memory and Redis pass the same tests.

The memory queue runs on a fake clock shared with its lease manager (sessions age instantly);
the Redis queue ages by real time, so :meth:`Case.age` polls the wall clock for it. Windows the
tests compare against are a few hundred milliseconds, so a loaded machine does not flake them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from tests.support.stack import eventually
from tether.core.events import now_ms
from tether.core.results import RunStatus
from tether.errors import InvalidId
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.runs.contract import BusyPolicy, RunRef, RunRequest, RunResult
from tether.runs.leases.base import Lease, LeaseManager
from tether.runs.leases.memory import InMemoryLeaseManager
from tether.runs.leases.redis import RedisLeaseManager
from tether.runs.queue.base import (
    FEED_RESULT_MAX_BYTES,
    CancelOutcome,
    IdleRelease,
    RunQueue,
    RunState,
    StopMode,
    SubmitOutcome,
    SubmitState,
    submit,
)
from tether.runs.queue.memory import InMemoryRunQueue
from tether.runs.queue.redis import RedisRunQueue

T = "acme"
S = "s-1"
S2 = "s-2"
#: The idle window of the recovery tests (real milliseconds on Redis).
IDLE_MS = 300
#: The sweeper's claim TTL in the claim tests (real milliseconds on Redis).
KICK_TTL_MS = 300
#: A short block for "nothing new on the feed" reads.
SHORT_BLOCK_MS = 50


class FakeClock:
    """Milliseconds that only move when the test says so."""

    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


@dataclass
class Case:
    """One backend under test: the queue, its lease manager and how to let time pass."""

    kind: str
    runs: RunQueue
    leases: LeaseManager
    clock: FakeClock | None = None

    def now_ms(self) -> int:
        """The queue's notion of now."""
        return self.clock.ms if self.clock is not None else now_ms()

    def age(self, ms: int) -> None:
        """Let at least ``ms`` milliseconds pass for the queue and its leases."""
        if self.clock is not None:
            self.clock.ms += ms
            return
        target = now_ms() + ms
        eventually(lambda: now_ms() > target, timeout_s=ms / 1000 + 10, interval_s=0.005)


@pytest.fixture(params=["memory", "redis", "cluster"])
def case(request: pytest.FixtureRequest) -> Iterator[Case]:
    """The same tests on memory, a redis-server and a 3-master Redis Cluster (every script of
    the queue touches one slot: a CROSSSLOT would fail the cluster case)."""
    if request.param == "memory":
        clock = FakeClock()
        mem_leases = InMemoryLeaseManager(clock=lambda: clock.ms / 1000)
        yield Case("memory", InMemoryRunQueue(mem_leases, clock=clock), mem_leases, clock)
        return
    if request.param == "cluster":
        client: redis.Redis = redis_from_url(request.getfixturevalue("cluster_url"))
    else:
        client = request.getfixturevalue("redis_client")
    keys = RedisKeys("tether-test")
    try:
        yield Case(
            request.param,
            RedisRunQueue(client, keys, result_ttl_s=3600),
            RedisLeaseManager(client, keys=keys),
        )
    finally:
        if request.param == "cluster":
            client.close()


_serial = itertools.count(1)


def ref(run_id: str, *, session: str = S, tenant: str = T) -> RunRef:
    """Where a run of the default session (or the given one) lives."""
    return RunRef(tenant, session, run_id)


def req(
    run_id: str | None = None,
    *,
    request_id: str | None = None,
    session: str = S,
    tenant: str = T,
    on_busy: BusyPolicy = BusyPolicy.ENQUEUE,
) -> RunRequest:
    """A valid run request; fresh run and request ids unless given."""
    run_id = run_id or f"run-{next(_serial)}"
    return RunRequest(
        run_id=run_id,
        request_id=request_id or f"req-{run_id}",
        tenant=tenant,
        session_id=session,
        agent="echo",
        input=f"input of {run_id}",
        metadata={"n": 1, "tags": ["a", "b"]},
        on_busy=on_busy,
    )


def completed(request: RunRequest, output: str = "done") -> RunResult:
    return RunResult(
        run_id=request.run_id,
        request_id=request.request_id,
        session_id=request.session_id,
        tenant=request.tenant,
        status=RunStatus.COMPLETED,
        output=output,
        steps=1,
        attempts=1,
    )


def failed(
    request: RunRequest, error_type: str = "SessionBusy", message: str = "busy"
) -> RunResult:
    return RunResult.failure(request, RunStatus.FAILED, error_type, message)


def queued(runs: RunQueue, *requests: RunRequest) -> None:
    """Submit and check that every request was queued."""
    outcomes = runs.submit_many(requests)
    assert outcomes == [SubmitOutcome(r.run_id, SubmitState.QUEUED) for r in requests]


def claimed(runs: RunQueue, *requests: RunRequest) -> None:
    """Queue the requests and begin each, as a worker's claim does: the session is active
    (workers keep the active index; a producer only marks its tenant's queued index)."""
    queued(runs, *requests)
    for request in requests:
        assert runs.begin(request.ref, "w-1") is not None


def feed(runs: RunQueue, after: bytes = b"0-0") -> list[str]:
    """The run ids announced after ``after``."""
    return [run.run_id for _, run in runs.read_done(after, SHORT_BLOCK_MS)]


# --- submissions --------------------------------------------------------------------------------


def test_submit_queues_in_fifo_order_per_session(case: Case) -> None:
    runs = case.runs
    a, b, c = req(), req(), req()
    other = req(session=S2)
    for r in (a, other, b, c):
        assert submit(runs, r) == SubmitOutcome(r.run_id, SubmitState.QUEUED)
    assert runs.head(T, S) == a.run_id
    runs.finish(completed(a))
    assert runs.head(T, S) == b.run_id
    runs.finish(completed(b))
    assert runs.head(T, S) == c.run_id
    runs.finish(completed(c))
    assert runs.head(T, S) is None
    assert runs.head(T, S2) == other.run_id  # sessions queue independently


def test_resubmitting_a_request_id_is_duplicate_with_the_first_run_id(case: Case) -> None:
    runs = case.runs
    first = req("run-a", request_id="req-1")
    again = req("run-b", request_id="req-1")
    queued(runs, first)
    assert submit(runs, again) == SubmitOutcome("run-a", SubmitState.DUPLICATE)
    assert runs.pending_count(T, S) == 1
    assert runs.get(ref("run-b")) is None
    # Still a duplicate once the first run finished: the request is never applied twice.
    runs.finish(completed(first))
    assert submit(runs, again) == SubmitOutcome("run-a", SubmitState.DUPLICATE)
    assert runs.pending_count(T, S) == 0
    assert runs.get(ref("run-b")) is None


def test_new_request_reusing_a_taken_run_id_is_taken(case: Case) -> None:
    runs = case.runs
    first = req("run-a", request_id="req-1")
    thief = req("run-a", request_id="req-2")
    queued(runs, first)
    assert submit(runs, thief) == SubmitOutcome("run-a", SubmitState.TAKEN)
    assert runs.pending_count(T, S) == 1
    view = runs.get(ref("run-a"))
    assert view is not None and view.request_id == "req-1" and view.request == first
    # A finished run stays finished: its id is not queued again either.
    runs.finish(completed(first))
    assert submit(runs, thief) == SubmitOutcome("run-a", SubmitState.TAKEN)
    assert runs.pending_count(T, S) == 0
    assert runs.get(ref("run-a")).result == completed(first)  # type: ignore[union-attr]


def test_a_run_id_is_unique_per_session_not_per_tenant(case: Case) -> None:
    runs = case.runs
    first = req("run-a", request_id="req-1")
    twin = req("run-a", request_id="req-2", session=S2)
    abroad = req("run-a", request_id="req-1", tenant="other")  # same session name too
    queued(runs, first, twin, abroad)
    assert (runs.head(T, S), runs.head(T, S2), runs.head("other", S)) == ("run-a",) * 3
    views = [runs.get(r.ref) for r in (first, twin, abroad)]
    assert [v.request if v is not None else None for v in views] == [first, twin, abroad]
    # Each is its own run: attempts, cancel flags and results do not leak between them.
    assert runs.begin(twin.ref, "worker-a") == 1
    assert runs.request_cancel(first.ref) is CancelOutcome.CANCELLED
    assert runs.cancel_requested(twin.ref) is False
    assert runs.cancel_requested(abroad.ref) is False
    assert runs.begin(first.ref, "worker-a") is None
    assert runs.begin(abroad.ref, "worker-a") == 1
    runs.finish(completed(twin))
    assert runs.peek_many([twin.ref]) == {"run-a": completed(twin)}
    assert runs.peek_many([first.ref]) == {"run-a": None}
    assert runs.pending_count(T, S) == 1
    # Within the twin's session its id is still taken, finished or not.
    thief = req("run-a", request_id="req-3", session=S2)
    assert submit(runs, thief) == SubmitOutcome("run-a", SubmitState.TAKEN)
    assert runs.pending_count(T, S2) == 0


def test_reject_policy_with_runs_queued_is_busy_and_queues_nothing(case: Case) -> None:
    runs = case.runs
    first = req()
    eager = req(on_busy=BusyPolicy.REJECT)
    queued(runs, first)
    assert submit(runs, eager) == SubmitOutcome(eager.run_id, SubmitState.BUSY)
    assert runs.pending_count(T, S) == 1
    assert runs.head(T, S) == first.run_id
    assert runs.get(eager.ref) is None
    # Its request id was not taken: once the session is idle the same request is queued.
    runs.finish(completed(first))
    assert submit(runs, eager) == SubmitOutcome(eager.run_id, SubmitState.QUEUED)


def test_reject_policy_on_an_empty_queue_is_queued(case: Case) -> None:
    runs = case.runs
    eager = req(on_busy=BusyPolicy.REJECT)
    assert submit(runs, eager) == SubmitOutcome(eager.run_id, SubmitState.QUEUED)
    assert runs.head(T, S) == eager.run_id
    # Another session's queue does not make this one busy.
    elsewhere = req(session=S2, on_busy=BusyPolicy.REJECT)
    assert submit(runs, elsewhere) == SubmitOutcome(elsewhere.run_id, SubmitState.QUEUED)


def test_submit_many_returns_outcomes_in_order(case: Case) -> None:
    runs = case.runs
    a = req("run-a", request_id="req-a")
    dup = req("run-x", request_id="req-a")
    b = req("run-b", request_id="req-b", session=S2)
    taken = req("run-a", request_id="req-c")
    busy = req("run-d", request_id="req-d", on_busy=BusyPolicy.REJECT)
    c = req("run-c", request_id="req-e")
    assert runs.submit_many([a, dup, b, taken, busy, c]) == [
        SubmitOutcome("run-a", SubmitState.QUEUED),
        SubmitOutcome("run-a", SubmitState.DUPLICATE),
        SubmitOutcome("run-b", SubmitState.QUEUED),
        SubmitOutcome("run-a", SubmitState.TAKEN),
        SubmitOutcome("run-d", SubmitState.BUSY),
        SubmitOutcome("run-c", SubmitState.QUEUED),
    ]
    assert runs.pending_count(T, S) == 2
    assert runs.pending_count(T, S2) == 1
    assert runs.submit_many([]) == []


def test_get_returns_the_queued_record(case: Case) -> None:
    runs = case.runs
    request = req()
    assert submit(runs, request, on="gpu-agents") == SubmitOutcome(
        request.run_id, SubmitState.QUEUED
    )
    view = runs.get(request.ref)
    assert view is not None
    assert view.run_id == request.run_id
    assert view.status == RunState.QUEUED
    assert (view.tenant, view.session_id, view.request_id) == (T, S, request.request_id)
    assert view.request == request
    assert view.result is None
    assert view.submitted_at_ms == request.submitted_at_ms
    assert view.started_at_ms == 0
    assert view.last_error is None
    assert view.retry_at_ms == 0
    assert view.queue == "gpu-agents"
    # Without a queue name the record names none.
    plain = req()
    queued(runs, plain)
    assert runs.get(plain.ref).queue is None  # type: ignore[union-attr]


def test_get_unknown_run_is_none(case: Case) -> None:
    assert case.runs.get(ref("run-unknown")) is None


def test_peek_many_omits_unknown_ids_and_gives_none_for_unfinished(case: Case) -> None:
    runs = case.runs
    waiting, done = req(), req()
    queued(runs, waiting, done)
    result = completed(done)
    runs.finish(result)
    assert runs.peek_many([waiting.ref, ref("run-unknown"), done.ref]) == {
        waiting.run_id: None,
        done.run_id: result,
    }
    assert runs.peek_many([ref("run-unknown")]) == {}
    assert runs.peek_many([]) == {}


# --- the session queue ----------------------------------------------------------------------------


def test_begin_counts_attempts_and_marks_the_run_running(case: Case) -> None:
    runs = case.runs
    request = req()
    queued(runs, request)
    before = case.now_ms()
    assert [runs.begin(request.ref, "worker-a") for _ in range(3)] == [1, 2, 3]
    view = runs.get(request.ref)
    assert view is not None
    assert view.status == RunState.RUNNING
    assert before <= view.started_at_ms <= case.now_ms()
    assert view.request == request
    assert runs.head(T, S) == request.run_id  # running is still queued until finished


def test_note_failure_records_last_error_and_retry_time(case: Case) -> None:
    runs = case.runs
    request = req()
    queued(runs, request)
    before = case.now_ms()
    runs.note_failure(request.ref, "StreamUnavailable: redis away", retry_after_ms=5000)
    after = case.now_ms()
    view = runs.get(request.ref)
    assert view is not None
    assert view.last_error == "StreamUnavailable: redis away"
    assert before + 5000 <= view.retry_at_ms <= after + 5000
    # A failure without backoff replaces the error and keeps the retry time.
    runs.note_failure(request.ref, "FencedOut: lost the lease")
    again = runs.get(request.ref)
    assert again is not None
    assert again.last_error == "FencedOut: lost the lease"
    assert again.retry_at_ms == view.retry_at_ms
    assert again.status == RunState.QUEUED


def test_begin_never_creates_a_record_for_an_unknown_run(case: Case) -> None:
    runs = case.runs
    runs.begin(ref("run-unknown"), "worker-a")
    assert runs.get(ref("run-unknown")) is None
    assert runs.peek_many([ref("run-unknown")]) == {}


def test_note_failure_never_creates_a_record_for_an_unknown_run(case: Case) -> None:
    runs = case.runs
    runs.note_failure(ref("run-unknown"), "boom", retry_after_ms=1000)
    assert runs.get(ref("run-unknown")) is None
    assert runs.peek_many([ref("run-unknown")]) == {}


def test_finish_records_the_result_with_its_status(case: Case) -> None:
    runs = case.runs
    good, bad = req(), req()
    queued(runs, good, bad)
    runs.begin(good.ref, "worker-a")
    ok = completed(good, "all good")
    runs.finish(ok)
    view = runs.get(good.ref)
    assert view is not None
    assert view.status == RunStatus.COMPLETED
    assert view.result == ok
    assert view.request == good  # the request stays on the record
    failure = failed(bad, "ModelError", "the model said no")
    runs.finish(failure)
    bad_view = runs.get(bad.ref)
    assert bad_view is not None
    assert bad_view.status == RunStatus.FAILED
    assert bad_view.result == failure
    assert runs.peek_many([good.ref, bad.ref]) == {good.run_id: ok, bad.run_id: failure}


def test_finish_of_a_run_without_a_record_records_its_ids(case: Case) -> None:
    runs = case.runs
    lost = req()  # never submitted here: its record expired or was lost with Redis
    result = completed(lost)
    runs.finish(result)
    view = runs.get(lost.ref)
    assert view is not None
    assert view.result == result
    assert view.status == RunStatus.COMPLETED
    assert (view.tenant, view.session_id, view.request_id) == (T, S, lost.request_id)


def test_finish_pops_the_run_even_when_it_is_not_at_the_head(case: Case) -> None:
    runs = case.runs
    a, b, c = req(), req(), req()
    queued(runs, a, b, c)
    runs.finish(completed(b))
    assert runs.pending_count(T, S) == 2
    assert runs.head(T, S) == a.run_id
    runs.finish(completed(a))
    assert runs.head(T, S) == c.run_id
    assert runs.pending_count(T, S) == 1


def test_finish_announces_the_run_once_on_the_completion_feed(case: Case) -> None:
    runs = case.runs
    assert runs.done_last_id() == b"0-0"
    start = runs.done_last_id()
    a, b = req(), req()
    queued(runs, a, b)
    runs.finish(completed(a))
    entries = runs.read_done(start, 1000)
    assert [run for _, run in entries] == [a.ref]
    pos_a = entries[0][0]
    assert isinstance(pos_a, bytes)
    assert runs.done_last_id() == pos_a
    assert runs.read_done(pos_a, SHORT_BLOCK_MS) == []
    runs.finish(completed(b))
    later = runs.read_done(pos_a, 1000)
    assert [run for _, run in later] == [b.ref]  # only what came after the position
    assert runs.done_last_id() == later[0][0]
    assert feed(runs, start) == [a.run_id, b.run_id]  # each run announced once


def test_read_done_with_nothing_new_returns_empty(case: Case) -> None:
    runs = case.runs
    assert runs.read_done(runs.done_last_id(), SHORT_BLOCK_MS) == []
    request = req()
    queued(runs, request)
    runs.finish(completed(request))
    assert runs.read_done(runs.done_last_id(), SHORT_BLOCK_MS) == []


def test_read_done_entries_carry_the_run_ref(case: Case) -> None:
    runs = case.runs
    start = runs.done_last_id()
    mine = req("run-a", request_id="req-1")
    twin = req("run-a", request_id="req-2", session=S2)
    abroad = req("run-a", request_id="req-1", tenant="other")
    queued(runs, mine, twin, abroad)
    results = [completed(abroad), completed(mine), failed(req("run-z", session=S2))]
    results.append(completed(twin))
    for result in results:
        if result.run_id == "run-z":
            assert runs.record_rejected(result)
        else:
            runs.finish(result)
    refs = [run for _, run in runs.read_done(start, 1000)]
    # a run its producer refused is announced on that producer's feed alone (#47: no tenant
    # writes the namespace's feed); every finished run is on the namespace's
    results = [r for r in results if r.run_id != "run-z"]
    # the feed is sharded: a reader merges the shards by entry id, so two completions of the
    # same millisecond in two shards come in either order (the order is the time's)
    assert sorted(refs) == sorted(result.ref for result in results)
    assert all(type(run) is RunRef for run in refs)
    # Each entry leads a listener straight to its record, though three share a run id.
    views = {run: runs.get(run) for run in refs}
    assert {ref: v.result if v is not None else None for ref, v in views.items()} == {
        result.ref: result for result in results
    }


def test_a_producers_feed_carries_small_results_and_the_namespace_feed_none(case: Case) -> None:
    runs, producer = case.runs, "p-carrier"
    feed = RedisKeys.feed(T, producer)
    start, everyone = runs.done_last_id(feed), runs.done_last_id()
    small, big = req(), req()
    queued(runs, small, big)
    small_result = completed(small)
    big_result = completed(big, output="x" * (FEED_RESULT_MAX_BYTES + 1))
    runs.finish(small_result, reply_to=producer)
    runs.finish(big_result, reply_to=producer)
    mine = runs.read_completions(start, 1000, feed)
    assert [(c.ref, c.result) for c in mine] == [(small.ref, small_result), (big.ref, None)]
    assert [c.result for c in runs.read_completions(everyone, 1000)] == [None, None]
    assert [c.position for c in mine] == [p for p, _ in runs.read_done(start, 1000, feed)]


def test_record_rejected_records_and_announces_a_never_queued_run(case: Case) -> None:
    runs = case.runs
    request = req()
    rejection = failed(request, "UnknownAgent", "no agent 'echo'")
    mine = RedisKeys.feed(T, "p-refuser")
    assert runs.record_rejected(rejection, reply_to="p-refuser")
    view = runs.get(request.ref)
    assert view is not None
    assert view.status == RunStatus.FAILED
    assert view.result == rejection
    assert view.request is None
    assert (view.tenant, view.session_id, view.request_id) == (T, S, request.request_id)
    assert runs.peek_many([request.ref]) == {request.run_id: rejection}
    assert runs.pending_count(T, S) == 0
    # announced to the producer that refused it, not on the namespace's feed, which only
    # workers write (#47: a tenant's credential writes no key shared with other tenants)
    assert [run.run_id for _, run in runs.read_done(b"0-0", SHORT_BLOCK_MS, mine)] == [
        request.run_id
    ]
    assert feed(runs) == []


def test_record_rejected_cannot_fail_a_queued_run(case: Case) -> None:
    runs = case.runs
    request = req()
    queued(runs, request)
    before = runs.get(request.ref)
    last = runs.done_last_id()
    forged = failed(request, "InvalidInput", "forged message reusing the run id")
    assert runs.record_rejected(forged) is False
    assert runs.get(request.ref) == before
    assert runs.head(T, S) == request.run_id
    assert runs.pending_count(T, S) == 1
    assert runs.read_done(last, SHORT_BLOCK_MS) == []


def test_record_rejected_cannot_rewrite_a_finished_run(case: Case) -> None:
    runs = case.runs
    request = req()
    queued(runs, request)
    result = completed(request)
    runs.finish(result)
    before = runs.get(request.ref)
    last = runs.done_last_id()
    assert runs.record_rejected(failed(request)) is False
    assert runs.get(request.ref) == before
    assert runs.peek_many([request.ref]) == {request.run_id: result}
    assert runs.read_done(last, SHORT_BLOCK_MS) == []
    # A rejected run is not rejected twice either.
    other = req()
    assert runs.record_rejected(failed(other, "SessionBusy", "first"))
    assert runs.record_rejected(failed(other, "SessionBusy", "second")) is False
    assert runs.get(other.ref).result.error_message == "first"  # type: ignore[union-attr]


def test_record_rejected_makes_the_run_locatable(case: Case) -> None:
    runs = case.runs
    request = req(session=S2)
    rejection = failed(request, "UnknownAgent", "no agent 'echo'")
    assert runs.locate(T, request.run_id) is None
    assert runs.record_rejected(rejection)
    found = runs.locate(T, request.run_id)
    assert found == request.ref
    assert found is not None and runs.get(found) is not None
    assert runs.get(found).result == rejection  # type: ignore[union-attr]
    assert runs.locate("other", request.run_id) is None


def test_record_rejected_in_another_session_keeps_the_first_location(case: Case) -> None:
    # Run ids are unique per session: a rejection naming another session is that session's
    # own run, recorded there; it neither touches the queued run nor moves the tenant's index.
    runs = case.runs
    request = req()
    queued(runs, request)
    elsewhere = failed(req(request.run_id, session=S2), "SessionBusy", "busy")
    assert runs.record_rejected(elsewhere)
    assert runs.get(ref(request.run_id, session=S2)).result == elsewhere  # type: ignore[union-attr]
    view = runs.get(request.ref)
    assert view is not None and view.status == RunState.QUEUED and view.result is None
    assert runs.locate(T, request.run_id) == request.ref


# --- locating a bare run id -----------------------------------------------------------------------


def test_locate_finds_a_run_of_its_own_tenant(case: Case) -> None:
    runs = case.runs
    request = req(session=S2)
    queued(runs, request)
    assert runs.locate(T, request.run_id) == request.ref
    found = runs.locate(T, request.run_id)
    assert isinstance(found, RunRef)
    assert runs.get(found) == runs.get(request.ref)
    runs.finish(completed(request))
    assert runs.locate(T, request.run_id) == request.ref  # still found once finished


def test_locate_is_none_for_unknown_ids_and_other_tenants(case: Case) -> None:
    runs = case.runs
    request = req()
    queued(runs, request)
    assert runs.locate(T, "run-unknown") is None
    assert runs.locate("other", request.run_id) is None
    # A tenant whose name extends ours, or contains ours, sees nothing of ours either.
    assert runs.locate(f"{T}x", request.run_id) is None
    assert runs.locate(f"{T}:x", request.run_id) is None
    # The other tenant's run of the same id is its own, found only by its own tenant.
    abroad = req(request.run_id, tenant="other")
    queued(runs, abroad)
    assert runs.locate("other", request.run_id) == abroad.ref
    assert runs.locate(T, request.run_id) == request.ref


def test_locate_keeps_the_first_session_to_use_a_run_id(case: Case) -> None:
    runs = case.runs
    first = req("run-a", request_id="req-1")
    later = req("run-a", request_id="req-2", session=S2)
    queued(runs, first)
    queued(runs, later)
    assert runs.locate(T, "run-a") == first.ref
    runs.finish(completed(later))
    runs.finish(completed(first))
    assert runs.locate(T, "run-a") == first.ref
    # The later run is still reachable by its full reference.
    assert runs.get(later.ref).result == completed(later)  # type: ignore[union-attr]
    # In one batch too, the first request of the batch wins.
    one = req("run-b", request_id="req-3", session=S2)
    two = req("run-b", request_id="req-4")
    queued(runs, one, two)
    assert runs.locate(T, "run-b") == one.ref


def test_drop_removes_a_queued_run(case: Case) -> None:
    runs = case.runs
    a, b = req(), req()
    queued(runs, a, b)
    runs.drop(T, S, a.run_id)
    assert runs.head(T, S) == b.run_id
    assert runs.pending_count(T, S) == 1
    runs.drop(T, S, "run-unknown")  # nothing to drop: nothing happens
    runs.drop(T, S2, b.run_id)  # another session's queue does not hold it
    assert runs.head(T, S) == b.run_id
    assert runs.pending_count(T, S) == 1


def test_release_if_idle_releases_the_lease_of_an_empty_queue(case: Case) -> None:
    runs, leases = case.runs, case.leases
    request = req()
    queued(runs, request)
    lease = leases.acquire(T, S, "worker-a", 60_000)
    assert lease is not None
    runs.finish(completed(request))
    assert stale(runs, 0) == [(T, S)]
    assert runs.release_if_idle(lease) is IdleRelease.RELEASED
    assert leases.holder(T, S) is None
    assert stale(runs, 0) == []  # an idle session is no longer active
    taken = leases.acquire(T, S, "worker-b", 60_000)
    assert taken is not None and taken.fence == lease.fence + 1


def test_release_if_idle_keeps_the_lease_while_runs_are_queued(case: Case) -> None:
    runs, leases = case.runs, case.leases
    queued(runs, req())
    lease = leases.acquire(T, S, "worker-a", 60_000)
    assert lease is not None
    assert runs.release_if_idle(lease) is IdleRelease.BUSY
    assert leases.holder(T, S) == "worker-a"
    assert leases.acquire(T, S, "worker-b", 60_000) is None
    assert leases.renew(lease, 60_000)


def test_release_if_idle_is_lost_when_the_lease_is_someone_elses(case: Case) -> None:
    runs, leases = case.runs, case.leases
    old = leases.acquire(T, S, "worker-a", 60_000)
    assert old is not None and leases.release(old)
    other = leases.acquire(T, S, "worker-b", 60_000)
    assert other is not None
    assert runs.release_if_idle(old) is IdleRelease.LOST  # an earlier grant of ours
    # Neither the current fence under our name nor our name under another fence is the grant.
    assert runs.release_if_idle(Lease(T, S, "worker-a", other.fence)) is IdleRelease.LOST
    assert runs.release_if_idle(Lease(T, S, "worker-b", old.fence)) is IdleRelease.LOST
    assert leases.holder(T, S) == "worker-b"
    assert leases.renew(other, 60_000)


def test_release_if_idle_is_lost_when_the_lease_expired(case: Case) -> None:
    runs, leases = case.runs, case.leases
    lease = leases.acquire(T, S, "worker-a", 100)
    assert lease is not None
    case.age(250)
    assert leases.holder(T, S) is None
    assert runs.release_if_idle(lease) is IdleRelease.LOST
    assert leases.current_fence(T, S) == lease.fence


@pytest.mark.parametrize("expect_idle", [False, True], ids=["no-hint", "idle-hint"])
def test_finish_and_release_frees_the_lease_when_the_queue_is_left_empty(
    case: Case, expect_idle: bool
) -> None:
    runs, leases = case.runs, case.leases
    request = req()
    queued(runs, request)
    lease = leases.acquire(T, S, "worker-a", 60_000)
    assert lease is not None
    mark = runs.done_last_id()
    done = completed(request)
    assert runs.finish_and_release(done, lease, expect_idle=expect_idle) == (
        None,
        IdleRelease.RELEASED,
    )
    assert runs.get(request.ref) is not None and runs.peek_many([request.ref]) == {
        request.run_id: done
    }
    assert runs.pending_count(T, S) == 0
    assert leases.holder(T, S) is None
    assert stale(runs, 0) == []  # an idle session is no longer active
    assert feed(runs, mark) == [request.run_id]  # announced like any finish
    taken = leases.acquire(T, S, "worker-b", 60_000)
    assert taken is not None and taken.fence == lease.fence + 1 and not taken.takeover


@pytest.mark.parametrize("expect_idle", [False, True], ids=["no-hint", "wrong-idle-hint"])
def test_finish_and_release_keeps_the_lease_while_runs_are_queued(
    case: Case, expect_idle: bool
) -> None:
    runs, leases = case.runs, case.leases
    first, second = req(), req()
    queued(runs, first, second)
    lease = leases.acquire(T, S, "worker-a", 60_000)
    assert lease is not None
    finished = runs.finish_and_release(completed(first), lease, expect_idle=expect_idle)
    assert finished == (second.run_id, None)
    assert leases.holder(T, S) == "worker-a"
    assert stale(runs, 0) == [(T, S)]  # a wrong hint still leaves it in the index


@pytest.mark.parametrize("expect_idle", [False, True], ids=["no-hint", "idle-hint"])
def test_finish_and_release_never_frees_someone_elses_lease(case: Case, expect_idle: bool) -> None:
    runs, leases = case.runs, case.leases
    request = req()
    queued(runs, request)
    old = leases.acquire(T, S, "worker-a", 100)
    assert old is not None
    case.age(250)
    other = leases.acquire(T, S, "worker-b", 60_000)
    assert other is not None
    # a zombie's finish still records the result (its head write decided that), but the lease
    # stays with the holder that took it over
    assert runs.finish_and_release(completed(request), old, expect_idle=expect_idle) == (
        None,
        IdleRelease.LOST,
    )
    assert leases.holder(T, S) == "worker-b"
    assert leases.renew(other, 60_000)


# --- cancellation ---------------------------------------------------------------------------------


def test_cancelling_a_queued_run_means_it_never_starts(case: Case) -> None:
    runs = case.runs
    request, bystander = req(), req()
    queued(runs, request, bystander)
    assert runs.cancel_requested(request.ref) is False
    assert runs.request_cancel(request.ref) is CancelOutcome.CANCELLED
    assert runs.cancel_requested(request.ref) is True
    assert runs.cancel_requested(bystander.ref) is False
    assert runs.begin(request.ref, "worker-a") is None  # refused: it never starts
    view = runs.get(request.ref)
    assert view is not None and view.status == RunState.QUEUED


def test_cancelling_a_running_run_is_only_a_request(case: Case) -> None:
    runs = case.runs
    request = req()
    queued(runs, request)
    assert runs.begin(request.ref, "worker-a") == 1
    assert runs.request_cancel(request.ref) is CancelOutcome.REQUESTED
    assert runs.cancel_requested(request.ref) is True


def test_request_cancel_changes_nothing_for_unknown_or_finished_runs(case: Case) -> None:
    runs = case.runs
    assert runs.request_cancel(ref("run-unknown")) is CancelOutcome.UNKNOWN
    assert runs.cancel_requested(ref("run-unknown")) is False
    request = req()
    queued(runs, request)
    runs.finish(completed(request))
    assert runs.request_cancel(request.ref) is CancelOutcome.FINISHED
    assert runs.cancel_requested(request.ref) is False
    rejected = req()
    assert runs.record_rejected(failed(rejected))
    assert runs.request_cancel(rejected.ref) is CancelOutcome.FINISHED
    assert runs.cancel_requested(rejected.ref) is False


# --- recovery -------------------------------------------------------------------------------------


def test_pending_count_counts_the_queued_runs(case: Case) -> None:
    runs = case.runs
    assert runs.pending_count(T, S) == 0
    a, b, c = req(), req(), req()
    queued(runs, a, b, c, req(session=S2))
    assert runs.pending_count(T, S) == 3
    assert runs.pending_count(T, S2) == 1
    assert runs.pending_count("other", S) == 0
    runs.finish(completed(a))
    assert runs.pending_count(T, S) == 2
    runs.drop(T, S, c.run_id)
    assert runs.pending_count(T, S) == 1


def test_a_session_no_worker_claimed_is_not_active_but_unclaimed(case: Case) -> None:
    # #47: a producer marks only its tenant's own queued index; the active index is workers'
    runs = case.runs
    queued(runs, req())
    case.age(IDLE_MS)
    assert stale(runs, 0) == []
    assert runs.unclaimed_sessions(IDLE_MS) == [(T, S)]


def test_unclaimed_sessions_lists_a_session_only_after_it_aged_past_idle_ms(case: Case) -> None:
    runs = case.runs
    queued(runs, req())
    assert runs.unclaimed_sessions(60_000) == []
    case.age(IDLE_MS)
    assert runs.unclaimed_sessions(IDLE_MS) == [(T, S)]
    queued(runs, req())  # a later run keeps the first mark (the oldest queued run counts)
    assert runs.unclaimed_sessions(IDLE_MS) == [(T, S)]
    assert runs.unclaimed_sessions(3_600_000) == []


def test_unclaimed_sessions_of_several_tenants_oldest_first(case: Case) -> None:
    runs = case.runs
    sessions = [("t-1", "s-c"), ("t-2", "s-a"), ("t-1", "s-b")]
    for tenant, session in sessions:
        queued(runs, req(tenant=tenant, session=session))
        case.age(10)
    assert runs.unclaimed_sessions(0) == sessions
    assert runs.unclaimed_sessions(0, limit=2) == sessions[:2]


def test_a_session_leaves_the_unclaimed_list_when_its_queue_empties(case: Case) -> None:
    runs, leases = case.runs, case.leases
    request = req()
    queued(runs, request, req(session=S2))
    lease = leases.acquire(T, S, "worker-a", 60_000)
    assert lease is not None
    runs.finish(completed(request))
    assert runs.release_if_idle(lease) is IdleRelease.RELEASED
    assert runs.unclaimed_sessions(0) == [(T, S2)]
    runs.forget_if_idle(T, S2)  # still queued: it stays
    assert runs.unclaimed_sessions(0) == [(T, S2)]


def stale(runs: RunQueue, idle_ms: int, limit: int = 100) -> list[tuple[str, str]]:
    """The sessions :meth:`~tether.runs.queue.base.RunQueue.idle_sessions` lists, as pairs."""
    return [(s.tenant, s.session_id) for s in runs.idle_sessions(idle_ms, limit)]


def test_stale_sessions_lists_a_session_only_after_it_aged_past_idle_ms(case: Case) -> None:
    runs = case.runs
    claimed(runs, req())
    assert stale(runs, 60_000) == []
    assert stale(runs, IDLE_MS) == []
    case.age(IDLE_MS)
    assert stale(runs, IDLE_MS) == [(T, S)]
    assert stale(runs, 0) == [(T, S)]
    assert stale(runs, 3_600_000) == []


def test_idle_sessions_say_how_long_each_went_without_progress(case: Case) -> None:
    """What the sweeper reads once for its two ages (the lease TTL and the backlog patience)."""
    runs = case.runs
    claimed(runs, req(session="s-old"))
    case.age(IDLE_MS)
    claimed(runs, req(session="s-new"))
    idle = runs.idle_sessions(0)
    assert [(s.tenant, s.session_id) for s in idle] == [(T, "s-old"), (T, "s-new")]
    assert idle[0].idle_ms - idle[1].idle_ms >= IDLE_MS and idle[1].idle_ms >= 0
    assert [s.session_id for s in runs.idle_sessions(idle[0].idle_ms)] == ["s-old"]


def test_stale_sessions_lists_the_oldest_first_up_to_limit(case: Case) -> None:
    runs = case.runs
    sessions = [("t-1", "s-c"), ("t-2", "s-a"), ("t-1", "s-b")]
    requests = [req(tenant=tenant, session=session) for tenant, session in sessions]
    for request in requests:
        claimed(runs, request)
        case.age(10)
    assert stale(runs, 0) == sessions
    assert stale(runs, 0, limit=2) == sessions[:2]
    # Progress on a session (a finished run) makes it the youngest.
    runs.finish(completed(requests[0]))
    assert stale(runs, 0) == [sessions[1], sessions[2], sessions[0]]


def test_stale_sessions_of_the_same_age_are_ordered_by_member_name(case: Case) -> None:
    # Redis orders equal scores by member "<tenant>/<session>": "a-b/x" before "a/x" ('-' < '/')
    # although ("a", "x") < ("a-b", "x"). Submitted in that order, Redis lists them so whether
    # their scores tie or not; the memory queue's clock always ties.
    runs = case.runs
    claimed(runs, req(tenant="a-b", session="x"), req(tenant="a", session="x"))
    assert stale(runs, 0) == [("a-b", "x"), ("a", "x")]


def test_claim_kick_succeeds_once_per_ttl(case: Case) -> None:
    runs = case.runs
    claimed(runs, req())
    assert runs.claim_kick(T, S, KICK_TTL_MS) is True
    assert runs.claim_kick(T, S, KICK_TTL_MS) is False
    assert runs.claim_kick(T, S2, KICK_TTL_MS) is True  # per session
    case.age(KICK_TTL_MS)
    assert runs.claim_kick(T, S, KICK_TTL_MS) is True
    assert runs.claim_kick(T, S, KICK_TTL_MS) is False


def test_claim_kick_refreshes_the_session_activity(case: Case) -> None:
    runs = case.runs
    claimed(runs, req())
    case.age(IDLE_MS)
    assert stale(runs, IDLE_MS) == [(T, S)]
    assert runs.claim_kick(T, S, 60_000) is True
    assert stale(runs, IDLE_MS) == []  # not stale again within that idle window
    case.age(IDLE_MS)
    assert stale(runs, IDLE_MS) == [(T, S)]
    assert runs.claim_kick(T, S, 60_000) is False  # the claim outlives the window
    assert stale(runs, IDLE_MS) == [(T, S)]  # a refused claim records nothing


def test_claim_kick_does_not_make_an_unknown_session_active(case: Case) -> None:
    runs = case.runs
    assert runs.claim_kick(T, S, 60_000) is True
    assert stale(runs, 0) == []


def test_forget_if_idle_removes_an_empty_unleased_session(case: Case) -> None:
    runs = case.runs
    request = req()
    claimed(runs, request, req(session=S2))
    runs.finish(completed(request))
    assert sorted(stale(runs, 0)) == [(T, S), (T, S2)]
    runs.forget_if_idle(T, S)
    assert stale(runs, 0) == [(T, S2)]
    runs.forget_if_idle(T, "never-seen")  # nothing to forget: nothing happens
    assert stale(runs, 0) == [(T, S2)]


def test_forget_if_idle_keeps_a_session_with_queued_runs(case: Case) -> None:
    runs = case.runs
    claimed(runs, req())
    runs.forget_if_idle(T, S)
    assert stale(runs, 0) == [(T, S)]
    assert runs.pending_count(T, S) == 1


def test_forget_if_idle_keeps_a_session_whose_lease_is_held(case: Case) -> None:
    runs, leases = case.runs, case.leases
    request = req()
    claimed(runs, request)
    lease = leases.acquire(T, S, "worker-a", 60_000)
    assert lease is not None
    runs.finish(completed(request))
    runs.forget_if_idle(T, S)
    assert stale(runs, 0) == [(T, S)]
    assert leases.holder(T, S) == "worker-a"
    assert leases.release(lease)
    runs.forget_if_idle(T, S)
    assert stale(runs, 0) == []


# --- id validation --------------------------------------------------------------------------------


def _bad_run_result(**overrides: Any) -> RunResult:
    fields: dict[str, Any] = {
        "run_id": "run-ok",
        "request_id": "req-ok",
        "session_id": S,
        "tenant": T,
        "status": RunStatus.FAILED,
        "error_type": "InvalidInput",
        "error_message": "x",
    }
    fields.update(overrides)
    return RunResult(**fields)


def _assert_nothing_written(case: Case) -> None:
    runs = case.runs
    assert runs.done_last_id() == b"0-0"
    assert stale(runs, 0) == []
    assert runs.pending_count(T, S) == 0
    assert runs.peek_many([ref("run-ok"), ref("run-good")]) == {}
    assert runs.locate(T, "run-ok") is None
    assert runs.locate(T, "run-good") is None


BAD_RUN_ID = "run/1"
BAD_TENANT = "../x"
BAD_SESSION = "a/b"
BAD_RUN = ref(BAD_RUN_ID)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda q: q.locate(T, BAD_RUN_ID), id="locate"),
        pytest.param(lambda q: q.get(BAD_RUN), id="get"),
        pytest.param(lambda q: q.peek_many([ref("run-ok"), BAD_RUN]), id="peek_many"),
        pytest.param(lambda q: q.begin(BAD_RUN, "worker-a"), id="begin"),
        pytest.param(lambda q: q.hand_back(BAD_RUN), id="hand_back"),
        pytest.param(lambda q: q.note_failure(BAD_RUN, "boom"), id="note_failure"),
        pytest.param(lambda q: q.finish(_bad_run_result(run_id=BAD_RUN_ID)), id="finish"),
        pytest.param(
            lambda q: q.record_rejected(_bad_run_result(run_id=BAD_RUN_ID)), id="record_rejected"
        ),
        pytest.param(lambda q: q.request_cancel(BAD_RUN), id="request_cancel"),
        pytest.param(lambda q: q.cancel_requested(BAD_RUN), id="cancel_requested"),
        pytest.param(lambda q: q.stop_mode(BAD_RUN), id="stop_mode"),
    ],
)
def test_run_ids_are_validated_before_anything_is_written(
    case: Case, call: Callable[[RunQueue], object]
) -> None:
    with pytest.raises(InvalidId, match="run id"):
        call(case.runs)
    _assert_nothing_written(case)


@pytest.mark.parametrize("tenant, session", [(BAD_TENANT, S), (T, BAD_SESSION)])
@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda q, t, s: q.head(t, s), id="head"),
        pytest.param(lambda q, t, s: q.pending_count(t, s), id="pending_count"),
        pytest.param(lambda q, t, s: q.drop(t, s, "run-ok"), id="drop"),
        pytest.param(lambda q, t, s: q.release_if_idle(Lease(t, s, "w", 1)), id="release"),
        pytest.param(lambda q, t, s: q.claim_kick(t, s, 1000), id="claim_kick"),
        pytest.param(lambda q, t, s: q.forget_if_idle(t, s), id="forget_if_idle"),
        pytest.param(
            lambda q, t, s: q.finish(_bad_run_result(tenant=t, session_id=s)), id="finish"
        ),
        pytest.param(
            lambda q, t, s: q.record_rejected(_bad_run_result(tenant=t, session_id=s)),
            id="record_rejected",
        ),
        pytest.param(lambda q, t, s: q.get(RunRef(t, s, "run-ok")), id="get"),
        pytest.param(lambda q, t, s: q.peek_many([RunRef(t, s, "run-ok")]), id="peek_many"),
        pytest.param(lambda q, t, s: q.begin(RunRef(t, s, "run-ok"), "w"), id="begin"),
        pytest.param(lambda q, t, s: q.hand_back(RunRef(t, s, "run-ok")), id="hand_back"),
        pytest.param(
            lambda q, t, s: q.note_failure(RunRef(t, s, "run-ok"), "boom"), id="note_failure"
        ),
        pytest.param(lambda q, t, s: q.request_cancel(RunRef(t, s, "run-ok")), id="request_cancel"),
        pytest.param(
            lambda q, t, s: q.cancel_requested(RunRef(t, s, "run-ok")), id="cancel_requested"
        ),
        pytest.param(lambda q, t, s: q.stop_mode(RunRef(t, s, "run-ok")), id="stop_mode"),
        pytest.param(lambda q, t, s: q.preempt(t, s, "run-ok", StopMode.CANCEL), id="preempt"),
    ],
)
def test_tenants_and_session_ids_are_validated_before_anything_is_written(
    case: Case, call: Callable[[RunQueue, str, str], object], tenant: str, session: str
) -> None:
    with pytest.raises(InvalidId):
        call(case.runs, tenant, session)
    _assert_nothing_written(case)


def test_locate_validates_the_tenant(case: Case) -> None:
    with pytest.raises(InvalidId):
        case.runs.locate(BAD_TENANT, "run-ok")
    _assert_nothing_written(case)


def test_submit_many_validates_every_request_before_queueing_any(case: Case) -> None:
    # RunRequest validates its ids; model_construct skips that, as a bug or a forged object
    # might: the queue must still refuse the whole batch before writing anything.
    good = req("run-good", request_id="req-good")
    for bad in (
        good.model_copy(update={"run_id": BAD_RUN_ID, "request_id": "req-2"}),
        good.model_copy(update={"run_id": "run-2", "tenant": BAD_TENANT}),
        good.model_copy(update={"run_id": "run-2", "session_id": BAD_SESSION}),
    ):
        with pytest.raises(InvalidId):
            case.runs.submit_many([good, bad])
        _assert_nothing_written(case)
        assert case.runs.get(ref("run-good")) is None


# --- multitask: preempting the running run -------------------------------------------------------


def test_preempt_asks_the_running_head_to_stop_in_the_given_mode(case: Case) -> None:
    runs = case.runs
    running, newcomer = req(), req()
    queued(runs, running, newcomer)
    assert runs.preempt(T, S, newcomer.run_id, StopMode.INTERRUPT) is None  # not started yet
    assert runs.stop_mode(running.ref) is None
    assert runs.begin(running.ref, "worker-a") == 1
    assert runs.preempt(T, S, newcomer.run_id, StopMode.INTERRUPT) == running.run_id
    assert runs.stop_mode(running.ref) is StopMode.INTERRUPT
    assert runs.stop_mode(newcomer.ref) is None


def test_preempt_never_targets_the_newcomer_itself(case: Case) -> None:
    runs = case.runs
    only = req()
    queued(runs, only)
    runs.begin(only.ref, "worker-a")
    assert runs.preempt(T, S, only.run_id, StopMode.CANCEL) is None
    assert runs.stop_mode(only.ref) is None


def test_a_cancel_is_never_softened_into_an_interrupt(case: Case) -> None:
    runs = case.runs
    running, newcomer = req(), req()
    queued(runs, running, newcomer)
    runs.begin(running.ref, "worker-a")
    assert runs.request_cancel(running.ref) is CancelOutcome.REQUESTED
    runs.preempt(T, S, newcomer.run_id, StopMode.INTERRUPT)
    assert runs.stop_mode(running.ref) is StopMode.CANCEL


def test_a_handed_back_attempt_does_not_count(case: Case) -> None:
    runs = case.runs
    request = req()
    queued(runs, request)
    assert runs.begin(request.ref, "worker-a") == 1
    runs.hand_back(request.ref)
    view = runs.get(request.ref)
    assert view is not None and view.status == RunState.QUEUED
    assert runs.begin(request.ref, "worker-b") == 1  # the budget is untouched
    runs.finish(completed(request))
    runs.hand_back(request.ref)  # a finished run is never reopened
    view = runs.get(request.ref)
    assert view is not None and view.status == RunStatus.COMPLETED


def test_locate_never_names_a_session_for_a_run_it_did_not_create(case: Case) -> None:
    """A duplicate request (answered with its first run) or a busy rejection creates no run,
    so the run id it carried stays unknown to the index (it may be used later, elsewhere)."""
    runs = case.runs
    first = req("run-first", request_id="rq-dup")
    assert submit(runs, first).state is SubmitState.QUEUED
    again = req("run-again", request_id="rq-dup")
    assert submit(runs, again).run_id == "run-first"  # a duplicate of the first
    assert runs.locate(T, "run-again") is None
    busy = req("run-busy", on_busy=BusyPolicy.REJECT)
    assert submit(runs, busy).state is SubmitState.BUSY
    assert runs.locate(T, "run-busy") is None
    # the ids are free: a later run with one of them, in another session, is found there
    later = req("run-again", session=S2)
    assert submit(runs, later).state is SubmitState.QUEUED
    assert runs.locate(T, "run-again") == later.ref
    assert runs.locate(T, "run-first") == first.ref


def test_finish_answers_the_next_run_of_the_session(case: Case) -> None:
    """The drain takes its next run from ``finish``'s answer instead of reading the queue."""
    runs = case.runs
    first, second = req(), req()
    other = req(session=S2)
    for request in (first, second, other):
        assert submit(runs, request).state is SubmitState.QUEUED
    assert runs.finish(completed(first)) == second.run_id
    assert runs.head(T, S) == second.run_id  # the answer is the queue's head
    assert runs.finish(completed(second)) is None  # empty: the drain releases the lease
    assert runs.finish(completed(other)) is None
    assert runs.finish(completed(first)) is None  # a repeated finish pops nothing more


def test_failures_before_commit_are_counted(case: Case) -> None:
    """The attempt budget may end a run whose every attempt failed before writing anything
    (the drain compares this count with the attempts), so only those are counted."""
    runs = case.runs
    request = req()
    assert submit(runs, request).state is SubmitState.QUEUED
    runs.note_failure(request.ref, "StoreUnavailable: head unreadable", before_commit=True)
    runs.note_failure(request.ref, "ConflictError: lease lost")  # may have written: not counted
    runs.note_failure(request.ref, "StoreUnavailable: head unreadable", before_commit=True)
    view = runs.get(request.ref)
    assert view is not None and view.failed_before_commit == 2
    assert view.last_error == "StoreUnavailable: head unreadable"
    unknown = req()  # never submitted: nothing is created
    runs.note_failure(unknown.ref, "x", before_commit=True)
    assert runs.get(unknown.ref) is None


# --- waiting for a model's budget -----------------------------------------------------------------


def test_a_waiting_run_shows_in_its_record_and_the_index_until_it_stops(case: Case) -> None:
    runs = case.runs
    first, second = req(), req(session="s-2")
    queued(runs, first)
    queued(runs, second)
    assert runs.waiting_runs() == []
    runs.note_waiting(first.ref, "model budget")
    runs.note_waiting(second.ref, "model budget")
    assert runs.waiting_runs() == [(first.ref, "model budget"), (second.ref, "model budget")]
    view = runs.get(first.ref)
    assert view is not None and view.waiting == "model budget"
    runs.note_waiting(first.ref, None)
    assert runs.waiting_runs() == [(second.ref, "model budget")]
    view = runs.get(first.ref)
    assert view is not None and view.waiting is None
    runs.note_waiting(second.ref, None)
    runs.note_waiting(second.ref, None)  # idempotent
    assert runs.waiting_runs() == []
