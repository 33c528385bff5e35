"""Crash the real worker cycle at every named commit step, recover, and check exactly-once effect.

For each step of :class:`tether.runs.commit.CommitStep`, before and after it: a worker applies a
run and dies there; its lease expires; the broker redelivers the request and a second worker
drains the session. Then: the request is applied once (one user message, one applied record,
one completion), the history is gapless with no duplicate, and fold(history) == stored memory.
The same scenarios run on in-memory backends (no servers, fast) and on a real redis-server with
S3 over HTTP (moto).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
import redis

from tests.support.crash import Backends, PowerSwitch, SimulatedCrash, crash_at, worker_runtime
from tether import SessionLogReader
from tether.core.items import UserMessage
from tether.ids import new_id
from tether.keys import RedisKeys
from tether.persistence.archives.memory import InMemoryEventArchive
from tether.persistence.storage_url import open_storage
from tether.persistence.stores.memory import InMemorySnapshotStore
from tether.persistence.streams.memory import InMemoryEventStream
from tether.persistence.streams.redis import RedisEventStream
from tether.runs.commit import CommitStep
from tether.runs.contract import RunRequest
from tether.runs.cycle import drain
from tether.runs.leases.memory import InMemoryLeaseManager
from tether.runs.leases.redis import RedisLeaseManager
from tether.runs.queue.base import SubmitState, submit
from tether.runs.queue.memory import InMemoryRunQueue
from tether.runs.queue.redis import RedisArchiveHint, RedisRunQueue

TENANT = "acme"
CRASH_POINTS = [(step, phase) for step in CommitStep for phase in ("before", "after")]


class FakeClock:
    """Milliseconds that only move when the test says so."""

    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


class DictHint:
    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], int] = {}

    def archived_through(self, tenant: str, session_id: str) -> int:
        return self.seen.get((tenant, session_id), 0)

    def record(self, tenant: str, session_id: str, seq: int) -> None:
        self.seen[(tenant, session_id)] = seq


def memory_backends() -> Backends:
    clock = FakeClock()
    leases = InMemoryLeaseManager(clock=lambda: clock.ms / 1000)

    def expire(tenant: str, session_id: str) -> None:
        clock.ms += 60_001  # one lease TTL of the worker runtime

    return Backends(
        name="memory",
        store=InMemorySnapshotStore(),
        archive=InMemoryEventArchive(),
        stream=InMemoryEventStream(leases),
        leases=leases,
        runs=InMemoryRunQueue(leases, clock=clock),
        hint=DictHint(),
        expire_lease=expire,
    )


@pytest.fixture(params=["memory", "redis+s3"])
def make_backends(request: pytest.FixtureRequest) -> Callable[[], Backends]:
    if request.param == "memory":
        return memory_backends
    client: redis.Redis = request.getfixturevalue("redis_client")
    bucket = request.getfixturevalue("s3_bucket")

    def real() -> Backends:
        keys = RedisKeys(f"crash-{new_id('c')[-8:]}")
        store, archive = open_storage(
            f"s3://{bucket.bucket}/{keys.prefix}", endpoint_url=bucket.endpoint_url
        )
        return Backends(
            name="redis+s3",
            store=store,
            archive=archive,
            stream=RedisEventStream(client, keys=keys),
            leases=RedisLeaseManager(client, keys=keys),
            runs=RedisRunQueue(client, keys, result_ttl_s=3600),
            hint=RedisArchiveHint(client, keys),
            expire_lease=lambda t, s: client.delete(keys.lease(t, s)),
        )

    return real


_counter = itertools.count()


def request_for(session_id: str, text: str) -> RunRequest:
    n = next(_counter)
    return RunRequest(
        run_id=f"run-{n}-{new_id('x')[-6:]}",
        request_id=f"req-{n}",
        tenant=TENANT,
        session_id=session_id,
        agent="calculator",
        input=text,
    )


def apply(backends: Backends, worker_id: str, request: RunRequest, **kw: int) -> None:
    """What ``tether.run`` does on a worker: register the request, drain the session."""
    rt = worker_runtime(backends, worker_id, **kw)
    submit(rt.runs, request)
    drain(rt, request.tenant, request.session_id)


def assert_exactly_once(backends: Backends, session_id: str, requests: list[RunRequest]) -> None:
    reader = SessionLogReader(backends.store, backends.archive)
    report = reader.verify(session_id, tenant=TENANT)
    assert report.ok, report.problems  # gapless, no duplicate, fold(history) == stored memory
    head = reader.read(session_id, tenant=TENANT)
    assert head is not None
    applied = [r.request_id for r in head.applied]
    inputs = [i.content for i in head.memory.items if isinstance(i, UserMessage)]
    for request in requests:
        assert applied.count(request.request_id) == 1, (request.request_id, applied)
        assert inputs.count(request.input) == 1, (request.input, inputs)
        view = backends.runs.get(request.run_id)
        assert view is not None and view.result is not None, request.run_id
        assert view.result.status == "COMPLETED"
        assert view.result.output == str(eval(request.input or "", {}))  # calculator's answer
    done = [run_id for _, run_id in backends.runs.read_done(b"0-0", block_ms=0)]
    for request in requests:
        assert done.count(request.run_id) == 1, (request.run_id, done)
    live = {e.seq: e for e in backends.stream.read(TENANT, session_id)}
    for event in reader.events(session_id, tenant=TENANT):
        # the live stream shows the committed attempt wherever the dead one had written
        assert live[event.seq] == event, event.seq


@pytest.mark.parametrize(("step", "phase"), CRASH_POINTS, ids=lambda v: str(v))
def test_crash_at_commit_step_is_recovered_exactly_once(
    make_backends: Callable[[], Backends], step: CommitStep, phase: str
) -> None:
    backends = make_backends()
    session_id = f"s-{step}-{phase}"
    history = [request_for(session_id, text) for text in ("1+1", "2*3")]
    for request in history:
        apply(backends, "warm-up", request)

    doomed = request_for(session_id, "6*7")
    switch = PowerSwitch()
    with crash_at(step, phase, "w1", switch) as fired, pytest.raises(SimulatedCrash):
        apply(backends, "w1", doomed, switch=switch)  # type: ignore[arg-type]
    assert fired, f"the cycle never reached {phase} {step}"

    backends.expire_lease(TENANT, session_id)
    apply(backends, "w2", doomed)  # the broker redelivers the message to another worker
    apply(backends, "w3", doomed)  # and once more: at-least-once delivery
    after = request_for(session_id, "10-4")
    apply(backends, "w2", after)  # the session goes on
    assert_exactly_once(backends, session_id, [*history, doomed, after])


def test_every_commit_step_is_covered() -> None:
    """The suite above crashes at each step the commit names, before and after it."""
    assert {s for s, _ in CRASH_POINTS} == set(CommitStep)
    assert len(CRASH_POINTS) == 2 * len(CommitStep) == 14


def test_crash_without_archiving_keeps_the_outbox_in_the_head() -> None:
    """With the default batch, most commits write no segment: a crash after the head write
    must still lose nothing (the events live in the head's outbox until a batch fills)."""
    backends = memory_backends()
    session_id = "s-outbox"
    doomed = request_for(session_id, "3+4")
    switch = PowerSwitch()
    with crash_at(CommitStep.HEAD_PUT, "after", "w1", switch), pytest.raises(SimulatedCrash):
        apply(backends, "w1", doomed, switch=switch, archive_batch_events=32)  # type: ignore[arg-type]
    assert backends.archive.last_seq(TENANT, session_id) == 0
    backends.expire_lease(TENANT, session_id)
    apply(backends, "w2", doomed, archive_batch_events=32)
    assert_exactly_once(backends, session_id, [doomed])


def test_redelivered_request_after_commit_is_a_duplicate() -> None:
    backends = memory_backends()
    first = request_for("s-dup", "5+5")
    apply(backends, "w1", first)
    rt = worker_runtime(backends, "w2")
    assert submit(rt.runs, first).state is SubmitState.DUPLICATE
    assert drain(rt, TENANT, "s-dup") == 0
    assert_exactly_once(backends, "s-dup", [first])
