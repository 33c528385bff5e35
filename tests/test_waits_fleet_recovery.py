"""100 runs parked on the fleet at once, on real workers (2 Celery worker processes of 2 pool
processes each, a redis-server of the test's own as both broker and run state, as ``tether up``
runs them, and S3 over HTTP): 40 asleep on timers, 30 waiting for a signal, 30 parents each
waiting on two children that sleep on timers of their own or wait for a signal (a child's end
must find its parent). Both tests of the 100 run in ``make test-long``; ``make test`` flushes a
fleet holding a few of each kind (:data:`FEW`).

- Flushed (FLUSHALL) while they all wait; then the signals are sent and the timers come due.
- Rolled back: a snapshot (``SAVE``) taken while they all wait, about half of them resume, then
  redis-server is killed, the snapshot restored and the server started again on its port; then
  the rest are signalled and their timers come due.

Each time every parked call is settled once (one continuation per call in the head, one
``TOOL_OUTPUT_REPLACED`` per call in the event log), every signal is consumed once (the one sent,
never one consumed before the rollback a second time), and ``sessions verify`` passes for every
session, parents and children.

Whatever the machine's speed, the assertions are the same: a timer that comes due before the
flush (or the snapshot) is one that resumed before it, and must still resume once.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.stack import Stack, eventually, unique
from tether.core.events import EventType, ToolOutputReplacedPayload
from tether.core.items import ToolOutput
from tether.core.results import RunStatus
from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerFleet
from tether.persistence.reader import SessionLogReader
from tether.persistence.storage_url import open_storage
from tether.producer import Producer
from tether.runs.waits.base import wake_request_id

QUEUE = "recoverq"
MODULES = "tests.support.recovery_agents,tests.support.signal_agents,tests.support.child_agents"
CHILDREN = 2


@dataclass(frozen=True)
class Size:
    """How many runs of each kind park: timers, signal listeners, parents of ``CHILDREN``."""

    timers: int
    signals: int
    parents: int


#: The 100 runs of the long tests.
FULL = Size(timers=40, signals=30, parents=30)
#: ``make test``'s flush: every kind and every variant of it (a parent's children asleep or
#: listening), a few of each, so the fleet parks them in seconds and their timers are set to
#: come due a few seconds later (not 30 s later, which 100 runs on a busy machine need).
FEW = Size(timers=4, signals=3, parents=4)
COMPLETED = RunStatus.COMPLETED.value


@dataclass
class Waiter:
    """A session parked on the fleet, and what the test expects of it."""

    kind: str
    """``timer``, ``signal``, ``parent`` or ``child``."""
    session_id: str
    group: int
    """0: resumes before the rollback; 1: after it (the flush: every one after it)."""
    calls: int = 1
    """How many calls it parks in turn (a listener told to take two signals parks twice)."""
    signal_ids: list[str] = field(default_factory=list)
    """The signals sent to it, in order."""


@dataclass
class Fleet:
    redis: RedisServer
    producer: Producer
    reader: SessionLogReader


@contextlib.contextmanager
def fleet(stack: Stack, log_dir: Path) -> Iterator[Fleet]:
    """Workers, a producer and a reader on a redis-server of the test's own (broker and state)
    and a store prefix of the test's own in the stack's bucket."""
    redis = RedisServer(unix_socket=False).start()
    store_url = f"s3://{stack.bucket}/{unique('recover')}"
    env = dict(
        stack.env,
        TETHER_BROKER_URL=redis.url,
        TETHER_REDIS_URL=redis.url,
        TETHER_STORE_URL=store_url,
        TETHER_AGENT_MODULES=MODULES,
        TETHER_QUEUE=QUEUE,
        TETHER_MAX_WAIT_S="3600",
        TETHER_WAIT_RECONCILE_S="2",
    )
    settings = stack.settings.model_copy(
        update={
            "queue": QUEUE,
            "broker_url": redis.url,
            "redis_url": redis.url,
            "store_url": store_url,
        }
    )
    store, archive = open_storage(
        store_url,
        endpoint_url=stack.s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    workers = WorkerFleet(env, log_dir, count=2, concurrency=2, queue=QUEUE, prefix="rc")
    producer = Producer(settings)
    try:
        workers.start()
        yield Fleet(redis, producer, SessionLogReader(store, archive))
    finally:
        producer.close()
        workers.stop()
        redis.close()


def plan(due_ms: Sequence[int], twice: int, size: Size) -> list[tuple[Waiter, str, str]]:
    """The runs of ``size``: each waiter with its input and agent. Group ``g``'s timers are due at
    ``due_ms[g]``; the first ``twice`` listeners take two signals in turn (group 1: they end
    after the rollback); half the parents' children sleep until their group's time, the
    other half wait for a signal."""
    runs: list[tuple[Waiter, str, str]] = []
    for i in range(size.timers):
        group = i % len(due_ms)
        runs.append((Waiter("timer", unique("timer"), group), f"until {due_ms[group]}", "alarm"))
    for i in range(size.signals):
        n, group = (2, len(due_ms) - 1) if i < twice else (1, i % len(due_ms))
        runs.append((Waiter("signal", unique("sig"), group, n), f"listen go 3600 {n}", "listener"))
    for i in range(size.parents):
        group = i % len(due_ms)
        if i // len(due_ms) % 2:
            text = f"fan {CHILDREN} agent listener input listen go 3600"
        else:
            text = f"fan {CHILDREN} agent alarm input until {due_ms[group]}"
        runs.append((Waiter("parent", unique("parent"), group), text, "parent"))
    return runs


def park_all(f: Fleet, due_ms: Sequence[int], size: Size, *, twice: int = 0) -> list[Waiter]:
    """Submit the runs of :func:`plan` and wait until each parked, and each child too; the
    waiters, children included (a child waiting for a signal is a ``signal`` waiter)."""
    runs = plan(due_ms, twice, size)
    handles = [f.producer.run_async(w.session_id, text, agent=agent) for w, text, agent in runs]
    children: list[Waiter] = []
    for (waiter, text, _), handle in zip(runs, handles, strict=True):
        result = handle.result(timeout=120)
        assert result.status is RunStatus.WAITING, (waiter, result)
        wait_for = result.pending[0].wait_for
        assert wait_for is not None
        kind = "signal" if "listener" in text else "child"
        children += [Waiter(kind, c.session_id, waiter.group) for c in wait_for.children]
    wait_applied(f, children, 1)  # the children park on their own
    return [w for w, _, _ in runs] + children


def wait_applied(f: Fleet, waiters: Sequence[Waiter], runs: int | None = None) -> None:
    """Wait until the head of each of ``waiters`` holds at least ``runs`` applied runs (None:
    all of them: the first, and one continuation per call it parks)."""
    left = [w for w in waiters]

    def done() -> bool:
        # in order, stopping at the first one not there yet: a pass reads few heads, and the
        # fleet, not this loop, keeps the S3 server busy
        while left:
            stored = f.reader.store.load("default", left[0].session_id)
            if stored is None or len(stored.snapshot.applied) < (runs or 1 + left[0].calls):
                return False
            left.pop(0)
        return True

    try:
        eventually(done, timeout_s=180, interval_s=0.5)
    except AssertionError:
        raise AssertionError(f"{len(left)} session(s) never got there, e.g. {left[:3]}") from None


def send_signals(f: Fleet, waiters: Sequence[Waiter]) -> None:
    """Send ``go`` to each listener among ``waiters`` (payload: its session), noting the ids."""
    for w in waiters:
        if w.kind == "signal":
            sent = f.producer.signal(w.session_id, "go", {"to": w.session_id})
            w.signal_ids.append(sent.signal_id)


def check_once(f: Fleet, waiters: Sequence[Waiter]) -> None:
    """Every parked call settled once, by its own continuation, every signal consumed once,
    every session verified (8 sessions at a time)."""
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda w: _check_one(f, w), waiters))


def _check_one(f: Fleet, w: Waiter) -> None:
    head = f.reader.read(w.session_id)
    assert head is not None, w
    requests = [r.request_id for r in head.applied]
    assert len(requests) == len(set(requests)) == 1 + w.calls, (w, requests)
    assert head.applied[-1].status == COMPLETED, (w, head.applied[-1])
    outputs = [i for i in head.memory.items if isinstance(i, ToolOutput)]
    assert len(outputs) == w.calls and all(o.wait_for is None for o in outputs), w
    wakes = [wake_request_id("default", w.session_id, o.call_id) for o in outputs]
    assert requests[1:] == wakes, (w, requests)
    replaced = [
        e.payload.call_id
        for e in head.events
        if e.type is EventType.TOOL_OUTPUT_REPLACED
        and isinstance(e.payload, ToolOutputReplacedPayload)
    ]
    assert sorted(replaced) == sorted(o.call_id for o in outputs), (w, replaced)
    if w.kind == "signal":
        taken = [json.loads(o.output)["signal_id"] for o in outputs]
        assert taken == w.signal_ids, (w, [o.output for o in outputs])
    report = f.reader.verify(w.session_id)
    assert report.ok, (w, report.problems)


def test_a_flushed_redis_loses_none_of_the_runs_of_every_kind_waiting(
    stack: Stack, tmp_path: Path
) -> None:
    """``make test``'s variant of the next test: a few runs of each kind."""
    _flushed(stack, tmp_path, FEW, due_in_ms=8_000)


@pytest.mark.slow  # 100 runs and a 30 s timer; the variant above runs each kind in make test
def test_a_flushed_redis_loses_none_of_100_waiting_runs(stack: Stack, tmp_path: Path) -> None:
    _flushed(stack, tmp_path, FULL, due_in_ms=30_000)


def _flushed(stack: Stack, tmp_path: Path, size: Size, *, due_in_ms: int) -> None:
    """Park the runs of ``size`` with timers due ``due_in_ms`` from now (after they all
    parked, on a busy machine), flush Redis, and check every one settles once."""
    with fleet(stack, tmp_path) as f:
        due_ms = int(time.time() * 1000) + due_in_ms
        waiters = park_all(f, [due_ms], size)
        print(f"parked {len(waiters)} sessions {due_ms - time.time() * 1000:.0f} ms before due")
        with contextlib.closing(f.redis.client()) as client:
            client.flushall()  # broker and run state: every record, index and queue
        send_signals(f, waiters)
        wait_applied(f, waiters)
        check_once(f, waiters)
        # no wait record, no family record, no timer: each settled (a settle follows its head)
        try:
            eventually(lambda: not _leftovers(f.redis), timeout_s=60, interval_s=0.5)
        except AssertionError:
            raise AssertionError(f"left in Redis: {_leftovers(f.redis)}") from None


def _leftovers(redis: RedisServer) -> dict[str, object]:
    """The wait records, family records and timers left in Redis, with what they hold."""
    client = redis.client()
    try:
        left: dict[str, object] = {}
        for pattern in ("*}:waits", "*}:family", "*{~timers:*}"):
            for key in client.scan_iter(pattern):
                kind = client.type(key)
                held = client.hgetall(key) if kind == b"hash" else client.zrange(key, 0, -1)
                left[key.decode()] = held
        return left
    finally:
        client.close()


@pytest.mark.slow
def test_a_redis_rolled_back_loses_none_of_100_waiting_runs(stack: Stack, tmp_path: Path) -> None:
    with fleet(stack, tmp_path) as f:
        now_ms = int(time.time() * 1000)
        waiters = park_all(f, [now_ms + 20_000, now_ms + 35_000], FULL, twice=FULL.signals // 2)
        first = [w for w in waiters if w.group == 0]
        twice = [w for w in waiters if w.calls == 2]
        send_signals(f, twice)  # consumed around the snapshot: never a second time after it
        snapshot = _snapshot(f.redis, tmp_path / "snapshot.rdb")
        send_signals(f, [w for w in first if w.kind == "signal"])
        wait_applied(f, first)
        wait_applied(f, twice, 2)  # the first signal was consumed before the rollback
        _restore(f.redis, snapshot)
        send_signals(f, [w for w in waiters if w.group == 1 or w.calls == 2])
        wait_applied(f, waiters)
        check_once(f, waiters)


def _snapshot(redis: RedisServer, into: Path) -> Path:
    """``SAVE`` the server's data, and keep a copy of the RDB file."""
    client = redis.client()
    try:
        client.save()
        config = client.config_get("dir")
    finally:
        client.close()
    workdir = next(iter(config.values()))
    shutil.copyfile(
        Path(workdir.decode() if isinstance(workdir, bytes) else workdir) / "dump.rdb", into
    )
    return into


def _restore(redis: RedisServer, snapshot: Path) -> None:
    """Kill the server, put the snapshot back as its RDB file, start it on the same port."""
    client = redis.client()
    try:
        config = client.config_get("dir")
    finally:
        client.close()
    workdir = next(iter(config.values()))
    redis.kill()
    shutil.copyfile(
        snapshot, Path(workdir.decode() if isinstance(workdir, bytes) else workdir) / "dump.rdb"
    )
    redis.start()
