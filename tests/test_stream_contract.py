"""Contract of :class:`tether.persistence.streams.base.EventStream`: memory and Redis pass the same
tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import pytest

from tests.support.protocols import assert_conforms
from tether import Agent, ModelResponse, ScriptedModel, SessionLogReader
from tether.core.events import AgentEvent, EventType, TextPayload
from tether.errors import ConflictError, FencedOut, InvalidId, InvalidInput
from tether.keys import RedisKeys
from tether.persistence.archives.memory import InMemoryEventArchive
from tether.persistence.redis_conn import redis_from_url
from tether.persistence.saving import save_session
from tether.persistence.stores.memory import InMemorySnapshotStore
from tether.persistence.streams import InMemoryEventStream, RedisEventStream
from tether.persistence.streams.base import EventStream
from tether.runs.leases import InMemoryLeaseManager, RedisLeaseManager
from tether.runs.leases.base import LeaseManager

T = "acme"
S = "s-1"
R = TypeVar("R")


@dataclass
class Backend:
    stream: EventStream
    leases: LeaseManager
    make_stream: Callable[[int | None], EventStream]  # another stream (max_len) on the same data
    make_retained: Callable[[int], EventStream]  # another one with retention_s, same data
    # let time pass for retention: Redis measures it on the server's clock, so the Redis
    # backends really sleep; the memory stream's retention clock is moved instead
    sleep: Callable[[float], None] = time.sleep


class MovableClock:
    """Seconds that pass only when the test sleeps."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds


@pytest.fixture(params=["memory", "redis", "cluster"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        mem_leases = InMemoryLeaseManager()
        clock = MovableClock()
        yield Backend(
            InMemoryEventStream(mem_leases),
            mem_leases,
            lambda n: InMemoryEventStream(mem_leases, max_len=n),
            lambda s: InMemoryEventStream(mem_leases, retention_s=s, clock=clock),
            clock.sleep,
        )
        return
    url_fixture = "cluster_url" if request.param == "cluster" else "redis_url"
    client = redis_from_url(request.getfixturevalue(url_fixture))
    keys = RedisKeys("tether-test")
    try:
        yield Backend(
            RedisEventStream(client, keys=keys),
            RedisLeaseManager(client, keys=keys),
            lambda n: RedisEventStream(client, keys=keys, max_len=n),
            lambda s: RedisEventStream(client, keys=keys, retention_s=s),
        )
    finally:
        client.close()


def ev(seq: int, text: str = "", *, tenant: str = T, session: str = S) -> AgentEvent:
    return AgentEvent(
        type=EventType.STEP_START,
        tenant=tenant,
        session_id=session,
        seq=seq,
        ts_ms=1_700_000_000_000 + seq,  # fixed, so that equal events compare equal
        payload=TextPayload(text=text or f"e{seq}"),
    )


def evs(first: int, last: int, tag: str = "e", **kw: str) -> list[AgentEvent]:
    return [ev(i, f"{tag}{i}", **kw) for i in range(first, last + 1)]


def texts(events: list[AgentEvent]) -> list[str]:
    out = []
    for e in events:
        assert isinstance(e.payload, TextPayload)
        out.append(e.payload.text)
    return out


def seqs(events: list[AgentEvent]) -> list[int]:
    return [e.seq for e in events]


def test_append_read_round_trip(backend: Backend) -> None:
    stream = backend.stream
    batch = evs(1, 5)
    assert stream.append(T, S, batch, 0) == 5
    assert stream.read(T, S) == batch
    assert seqs(stream.read(T, S, after_seq=2)) == [3, 4, 5]
    assert seqs(stream.read(T, S, after_seq=2, limit=2)) == [3, 4]
    assert stream.read(T, S, after_seq=5) == []
    assert stream.read(T, "never-written") == []
    assert stream.append(T, S, [], 0) == 5  # an empty batch reports where the stream is
    assert_conforms(stream, EventStream)


def test_tail_resume_after_disconnect_gets_exactly_the_rest(backend: Backend) -> None:
    stream = backend.stream
    consumer_left = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(1, 51):
                if i == 21:  # the rest is appended while the consumer resumes
                    consumer_left.wait(timeout=10)
                stream.append(T, S, [ev(i)], 0)
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    first: list[AgentEvent] = []
    tail = stream.tail(T, S, after_seq=0, block_ms=100, idle_timeout_s=10)
    for event in tail:
        first.append(event)
        if len(first) == 10:
            break
    tail.close()  # type: ignore[attr-defined]
    consumer_left.set()
    rest: list[AgentEvent] = []
    for event in stream.tail(T, S, after_seq=first[-1].seq, block_ms=100, idle_timeout_s=10):
        rest.append(event)
        if event.seq == 50:
            break
    thread.join(timeout=10)
    assert not errors
    assert seqs(first) == list(range(1, 11))
    assert seqs(rest) == list(range(11, 51))
    assert rest == evs(11, 50)
    # Nothing more: a tail from the end stays empty and stops when idle.
    assert list(stream.tail(T, S, after_seq=50, block_ms=50, idle_timeout_s=0.2)) == []


def test_tail_stops_when_idle(backend: Backend) -> None:
    backend.stream.append(T, S, evs(1, 3), 0)
    started = time.monotonic()
    got = list(backend.stream.tail(T, S, after_seq=1, block_ms=50, idle_timeout_s=0.3))
    elapsed_s = time.monotonic() - started
    assert seqs(got) == [2, 3]
    assert 0.25 <= elapsed_s < 5
    assert list(backend.stream.tail(T, S, after_seq=3, idle_timeout_s=0)) == []


def test_fenced_out_writer_appends_nothing(backend: Backend) -> None:
    stream, leases = backend.stream, backend.leases
    old = leases.acquire(T, S, "worker-a", 10_000)
    assert old is not None and old.fence == 1
    assert stream.append(T, S, evs(1, 3), old.fence) == 3
    assert leases.release(old)
    new = leases.acquire(T, S, "worker-b", 10_000)
    assert new is not None and new.fence == 2
    # The new holder has not written yet: the fence counter alone rejects the stale writer.
    with pytest.raises(FencedOut, match="fence 1"):
        stream.append(T, S, evs(4, 6), old.fence)
    assert seqs(stream.read(T, S)) == [1, 2, 3]
    assert stream.append(T, S, evs(4, 5, "b"), new.fence) == 5
    with pytest.raises(FencedOut):
        stream.append(T, S, evs(6, 6), old.fence)
    with pytest.raises(FencedOut):  # a writer without a lease is older than any grant
        stream.append(T, S, evs(6, 6), 0)
    assert texts(stream.read(T, S)) == ["e1", "e2", "e3", "b4", "b5"]


def test_fenced_out_after_lease_expiry(backend: Backend) -> None:
    stream, leases = backend.stream, backend.leases
    old = leases.acquire(T, S, "worker-a", 200)
    assert old is not None
    stream.append(T, S, evs(1, 2), old.fence)
    new = _poll(lambda: leases.acquire(T, S, "worker-b", 10_000), timeout_s=5)
    assert new.fence > old.fence
    with pytest.raises(FencedOut):
        stream.append(T, S, evs(3, 4), old.fence)
    assert seqs(stream.read(T, S)) == [1, 2]


def test_idempotent_reappend(backend: Backend) -> None:
    stream = backend.stream
    batch = evs(1, 5)
    assert stream.append(T, S, batch, 1) == 5
    assert stream.append(T, S, batch, 1) == 5
    assert stream.append(T, S, evs(2, 3), 1) == 5  # an older retry changes nothing either
    assert stream.read(T, S) == batch
    # An overlapping retry appends only what is new.
    assert stream.append(T, S, evs(4, 7, "x"), 1) == 7
    assert texts(stream.read(T, S)) == ["e1", "e2", "e3", "e4", "e5", "x6", "x7"]


def test_gap_is_rejected(backend: Backend) -> None:
    stream = backend.stream
    stream.append(T, S, evs(1, 3), 1)
    with pytest.raises(ConflictError, match="next seq must be 4"):
        stream.append(T, S, evs(5, 6), 1)
    with pytest.raises(ConflictError):  # a newer fence may rewind, but not skip either
        stream.append(T, S, evs(5, 6), 2)
    assert seqs(stream.read(T, S)) == [1, 2, 3]
    with pytest.raises(InvalidInput, match="not contiguous"):
        stream.append(T, S, [ev(4), ev(6)], 1)
    with pytest.raises(InvalidInput, match="start at 1"):
        stream.append(T, "other", [ev(0, session="other")], 1)


def test_restored_session_may_start_at_its_own_seq(backend: Backend) -> None:
    # A stream with no history (new, or a session restored from a snapshot at seq 100).
    assert backend.stream.append(T, S, evs(101, 102), 1) == 102
    assert seqs(backend.stream.read(T, S)) == [101, 102]
    with pytest.raises(ConflictError):
        backend.stream.append(T, S, evs(104, 104), 1)


def test_batch_must_belong_to_the_session(backend: Backend) -> None:
    with pytest.raises(InvalidInput, match="belongs to"):
        backend.stream.append(T, S, [ev(1, session="other")], 0)
    with pytest.raises(InvalidInput, match="belongs to"):
        backend.stream.append(T, S, [ev(1, tenant="other")], 0)
    with pytest.raises(InvalidId):
        backend.stream.append(T, "bad/id", [], 0)
    with pytest.raises(InvalidId):
        backend.stream.read("bad tenant", S)
    with pytest.raises(InvalidInput):
        backend.stream.append(T, S, evs(1, 1), -1)
    assert backend.stream.read(T, S) == []


def test_newer_fence_rewind_replaces_entries(backend: Backend) -> None:
    stream = backend.stream
    stream.append(T, S, evs(1, 10, "a"), 1)
    tail = stream.tail(T, S, after_seq=9, block_ms=50, idle_timeout_s=5)
    assert next(tail).seq == 10  # a live consumer that has seen everything
    # A retried run (fence 2) replaces the abandoned attempt from seq 6 on.
    assert stream.append(T, S, evs(6, 8, "b"), 2) == 8
    expected = [f"a{i}" for i in range(1, 6)] + ["b6", "b7", "b8"]
    assert texts(stream.read(T, S)) == expected  # a9, a10 are gone with their attempt
    assert texts([next(tail) for _ in range(3)]) == ["b6", "b7", "b8"]  # seq goes back
    tail.close()  # type: ignore[attr-defined]
    # A consumer that was away at seq 10 learns about the rewind on resume.
    resumed = list(stream.tail(T, S, after_seq=10, block_ms=50, idle_timeout_s=0.2))
    assert texts(resumed) == ["b6", "b7", "b8"]
    # The new writer continues normally; the old fence is fenced out.
    assert stream.append(T, S, evs(9, 12, "b"), 2) == 12
    assert texts(stream.read(T, S, after_seq=5)) == [f"b{i}" for i in range(6, 13)]
    with pytest.raises(FencedOut):
        stream.append(T, S, evs(13, 13), 1)
    assert seqs(stream.read(T, S)) == list(range(1, 13))


def test_trim(backend: Backend) -> None:
    stream = backend.stream
    stream.append(T, S, evs(1, 10), 1)
    assert stream.trim(T, S, min_seq=4) == 3
    assert seqs(stream.read(T, S)) == list(range(4, 11))
    assert stream.trim(T, S, max_len=5) == 2
    assert seqs(stream.read(T, S)) == list(range(6, 11))
    assert stream.trim(T, S, max_len=100, min_seq=2) == 0
    assert stream.append(T, S, evs(11, 11), 1) == 11  # trimming keeps the sequence position
    with pytest.raises(InvalidInput):
        stream.trim(T, S)


def test_trim_never_resurrects_abandoned_events(backend: Backend) -> None:
    stream = backend.stream
    stream.append(T, S, evs(1, 10, "a"), 1)
    stream.append(T, S, evs(5, 6, "b"), 2)  # the view is a1..a4 b5 b6
    assert stream.trim(T, S, min_seq=3) == 2
    assert texts(stream.read(T, S)) == ["a3", "a4", "b5", "b6"]
    # Nothing visible at seq >= 8: everything goes, a8..a10 must not come back.
    stream.trim(T, S, min_seq=8)
    assert stream.read(T, S) == []
    assert stream.append(T, S, evs(7, 7, "b"), 2) == 7
    assert texts(stream.read(T, S)) == ["b7"]


def test_long_stream_with_rewind_reads_across_pages(backend: Backend) -> None:
    stream = backend.stream
    for first in range(1, 1201, 100):
        stream.append(T, S, evs(first, first + 99, "a"), 1)
    for first in range(700, 1101, 100):  # the rewind's entries span several Redis pages
        stream.append(T, S, evs(first, min(first + 99, 1100), "b"), 2)
    events = stream.read(T, S)
    assert seqs(events) == list(range(1, 1101))
    assert texts(events)[698:700] == ["a699", "b700"]
    assert texts(stream.read(T, S, after_seq=1000, limit=3)) == ["b1001", "b1002", "b1003"]
    assert texts(stream.read(T, S, after_seq=10, limit=2)) == ["a11", "a12"]
    tailed = list(stream.tail(T, S, after_seq=1098, idle_timeout_s=0))
    assert texts(tailed) == ["b1099", "b1100"]


def test_retention_bound(backend: Backend) -> None:
    bounded = backend.make_stream(10)
    for i in range(1, 301):
        bounded.append(T, S, [ev(i)], 1)
    kept = bounded.read(T, S)
    assert 10 <= len(kept) < 300  # Redis trims approximately (whole stream nodes)
    assert seqs(kept)[-10:] == list(range(291, 301))
    assert seqs(kept) == list(range(301 - len(kept), 301))


#: The time-based retention of the tests below: short, so they sleep little, and long enough
#: that the "still fresh" entries survive a scheduling stall of a busy machine (0.7 s margin).
RETENTION_S = 2


def test_time_retention_drops_older_entries_on_the_next_append(backend: Backend) -> None:
    stream = backend.make_retained(RETENTION_S)
    stream.append(T, S, evs(1, 3, "a"), 1)
    backend.sleep(1.0)
    stream.append(T, S, evs(4, 6, "b"), 1)
    backend.sleep(RETENTION_S - 0.7)  # a1..a3 are now older than the retention, b4..b6 are not
    # Nothing goes by itself while the stream is in use: trimming is done by appends.
    assert texts(stream.read(T, S)) == ["a1", "a2", "a3", "b4", "b5", "b6"]
    assert stream.append(T, S, evs(7, 7, "c"), 1) == 7
    assert texts(stream.read(T, S)) == ["b4", "b5", "b6", "c7"]
    # The position is the meta's, not the stream's: retries and gaps are judged as before.
    assert stream.append(T, S, [], 1) == 7
    assert stream.append(T, S, evs(6, 7, "x"), 1) == 7
    with pytest.raises(ConflictError, match="next seq must be 8"):
        stream.append(T, S, evs(9, 9), 1)
    assert texts(stream.read(T, S)) == ["b4", "b5", "b6", "c7"]


def test_time_retention_expires_an_idle_stream_but_not_its_position(backend: Backend) -> None:
    stream = backend.make_retained(1)
    stream.append(T, S, evs(1, 5), 1)
    backend.sleep(1.3)
    assert stream.read(T, S) == []
    assert list(stream.tail(T, S, after_seq=0, idle_timeout_s=0)) == []
    with pytest.raises(ConflictError, match="next seq must be 6"):
        stream.append(T, S, evs(7, 7), 1)
    assert stream.append(T, S, evs(6, 6), 1) == 6
    assert seqs(stream.read(T, S)) == [6]
    # A consumer still at seq 2 gets the live suffix; the jump from 2 to 6 is its cue to read
    # the committed events from the head and the archive (see the reader test below).
    assert seqs(list(stream.tail(T, S, after_seq=2, idle_timeout_s=0))) == [6]
    with pytest.raises(InvalidInput, match="retention_s"):
        backend.make_retained(0)


def test_time_retention_never_resurrects_abandoned_events(backend: Backend) -> None:
    stream = backend.make_retained(1)
    stream.append(T, S, evs(1, 10, "a"), 1)
    backend.sleep(1.3)
    # A newer writer rewinds to seq 5: a1..a10 are all stale, and a7..a10 must not come back.
    assert stream.append(T, S, evs(5, 6, "b"), 2) == 6
    assert texts(stream.read(T, S)) == ["b5", "b6"]
    with pytest.raises(FencedOut):
        stream.append(T, S, evs(7, 7), 1)


def test_reader_gets_committed_events_of_a_time_trimmed_stream(backend: Backend) -> None:
    """The live stream is only a copy: what retention drops, the reader finds in the archive."""
    stream = backend.make_retained(1)
    store, archive = InMemorySnapshotStore(), InMemoryEventArchive()
    model = ScriptedModel(responder=lambda _request: ModelResponse.final("ok"))
    agent = Agent(model, store=store, archive=archive)
    session = agent.new_session(S, tenant=T)

    def publish(event: AgentEvent) -> None:  # what a worker does with each event
        stream.append(T, S, [event], 0)

    session.add_listener(publish)
    session.run("first")
    save_session(session, store, archive, archive_batch_events=1)  # all of it in the archive
    committed = list(session.events)
    assert archive.read(T, S) == committed
    backend.sleep(1.3)
    session.run("second")  # not committed: its events are only in the live stream
    live = stream.read(T, S)
    assert live and live[0].seq == committed[-1].seq + 1  # the first run's are gone from it
    reader = SessionLogReader(store, archive, stream)
    assert reader.events(S, tenant=T) == committed
    assert reader.events(S, tenant=T, include_live=True) == committed + live
    assert committed + live == session.events
    assert list(stream.tail(T, S, after_seq=1, idle_timeout_s=0)) == live


def test_tenant_isolation(backend: Backend) -> None:
    stream, leases = backend.stream, backend.leases
    stream.append("t1", S, evs(1, 3, "one", tenant="t1"), 0)
    stream.append("t2", S, evs(1, 2, "two", tenant="t2"), 0)
    assert texts(stream.read("t1", S)) == ["one1", "one2", "one3"]
    assert texts(stream.read("t2", S)) == ["two1", "two2"]
    # A lease in one tenant fences nothing in the other.
    lease = leases.acquire("t1", S, "w", 10_000)
    assert lease is not None
    assert stream.append("t2", S, evs(3, 3, "two", tenant="t2"), 0) == 3
    with pytest.raises(FencedOut):
        stream.append("t1", S, evs(4, 4, tenant="t1"), 0)
    # Ids may contain ':'; ("a:b", "c") and ("a", "b:c") are different sessions.
    stream.append("a:b", "c", [ev(1, "x", tenant="a:b", session="c")], 0)
    assert stream.read("a", "b:c") == []
    stream.append("a", "b:c", [ev(1, "y", tenant="a", session="b:c")], 0)
    assert texts(stream.read("a:b", "c")) == ["x"]
    assert texts(stream.read("a", "b:c")) == ["y"]


def test_concurrent_fenced_writers_never_interleave(backend: Backend) -> None:
    """Writers racing for the lease: each append either fully lands or is fenced out."""
    stream, leases = backend.stream, backend.leases
    results: list[tuple[int, bool]] = []
    lock = threading.Lock()

    def worker(name: str) -> None:
        for _ in range(20):
            lease = leases.acquire(T, S, name, 5_000)
            if lease is None:
                continue
            last = len(stream.read(T, S))
            try:
                stream.append(T, S, evs(last + 1, last + 3, name), lease.fence)
                ok = True
            except (FencedOut, ConflictError):
                ok = False
            leases.release(lease)
            with lock:
                results.append((lease.fence, ok))

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    events = stream.read(T, S)
    assert seqs(events) == list(range(1, len(events) + 1))
    assert len(events) == 3 * sum(ok for _, ok in results)
    fences = [f for f, _ in results]
    assert len(set(fences)) == len(fences)  # every grant had its own fence


def _poll(fn: Callable[[], R | None], *, timeout_s: float, interval_s: float = 0.01) -> R:
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)
