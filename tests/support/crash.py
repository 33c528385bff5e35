"""Crash a worker in-process at a named commit step, then recover it the way a second one would.

Also a pytest plugin: the ``make_backends`` fixture gives in-memory and real (redis-server + S3
over HTTP) backends to the same test. A test crashed at every point (``EVERY_CRASH_POINT``) runs
every point on memory in ``make test`` and, on redis-server + S3, each step once (before or
after, in turn: :data:`REAL_BACKEND_POINTS`); ``make test-long`` runs every point on both.

A :class:`SimulatedCrash` is a ``BaseException``: no handler in the cycle catches it, just as no
handler runs when a process dies. Once the crash fires, the dead worker's backends are switched
off (:class:`Powered`), so even its ``finally`` blocks cannot reach storage: its lease stays held
until it expires, as a killed worker's would.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from tether.ids import new_id
from tether.keys import RedisKeys
from tether.persistence.archives.memory import InMemoryEventArchive
from tether.persistence.archives.redis_hint import RedisArchiveHint
from tether.persistence.headcache import InMemoryHeadCache, RedisHeadCache
from tether.persistence.storage_url import open_storage
from tether.persistence.stores.blob import BlobSnapshotStore
from tether.persistence.stores.memory import InMemorySnapshotStore
from tether.persistence.streams.memory import InMemoryEventStream
from tether.persistence.streams.redis import RedisEventStream
from tether.runs.contract import RunRequest
from tether.runs.leases.base import LeaseManager
from tether.runs.leases.memory import InMemoryLeaseManager
from tether.runs.leases.redis import RedisLeaseManager
from tether.runs.queue.base import RunQueue
from tether.runs.queue.memory import InMemoryRunQueue
from tether.runs.queue.redis import RedisRunQueue
from tether.runs.signals.memory import InMemorySignalMailbox
from tether.runs.signals.redis import RedisSignalMailbox
from tether.runs.waits.children_memory import InMemoryChildBook
from tether.runs.waits.children_redis import RedisChildBook
from tether.runs.waits.marks import BlobWaitMarks
from tether.runs.waits.memory import InMemoryWaitIndex
from tether.runs.waits.redis import RedisWaitIndex
from tether.runtime.registry import AgentRegistry
from tether.settings import Settings
from tether.worker.engine.checkpoints.memory import InMemoryCheckpointStore
from tether.worker.engine.checkpoints.redis import RedisCheckpointStore
from tether.worker.engine.commit import CommitStep, Phase, StepContext, install_probe
from tether.worker.engine.services import EngineServices

#: Every named commit step, before and after: where the parked-run suites crash a worker.
EVERY_CRASH_POINT = [(step, phase) for step in CommitStep for phase in ("before", "after")]
#: The points ``make test`` also crashes on redis-server + S3: every step, before and after in
#: turn, and both sides of the head's PUT (S3's compare-and-set); the others, on those backends,
#: are ``@pytest.mark.slow`` (each costs S3 round trips).
REAL_BACKEND_POINTS = frozenset(
    {(step, ("before", "after")[n % 2]) for n, step in enumerate(CommitStep)}
    | {(CommitStep.HEAD_PUT, "before"), (CommitStep.HEAD_PUT, "after")}
)
#: A time (ms) by which every timer and timeout of the tests is due.
FAR_MS = 2**52

#: The worker default's head cache, on in every crash scenario (as in production).
HEAD_CACHE_TTL_MS = Settings.model_fields["head_cache_ttl_s"].default * 1000
HEAD_CACHE_MAX_BYTES = Settings.model_fields["head_cache_max_bytes"].default


class SimulatedCrash(BaseException):
    """The worker process died here."""


class PowerSwitch:
    """One worker's power: off after its crash."""

    def __init__(self) -> None:
        self.dead = False


class Powered:
    """A backend proxy that refuses every call once its worker is dead."""

    def __init__(self, target: Any, switch: PowerSwitch) -> None:
        self._target = target
        self._switch = switch

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._switch.dead:
                raise SimulatedCrash(f"dead worker called {name}")
            return attr(*args, **kwargs)

        return call


@dataclass
class Backends:
    """One deployment's shared state: what survives a worker's death."""

    name: str
    store: Any
    archive: Any
    stream: Any
    leases: LeaseManager
    runs: RunQueue
    hint: Any
    checkpoints: Any
    expire_lease: Callable[[str, str], object]
    """Make the session's lease expire now (the TTL passing, without waiting for it)."""
    head_cache: Any = None
    """The cached heads ``store`` reads first (None: no cache)."""
    waits: Any = None
    """The wait records and timers index (None: none)."""
    marks: Any = None
    """The durable marks of waiting sessions (None: none)."""
    signals: Any = None
    """The sessions' mailboxes of signals (None: none)."""
    children: Any = None
    """Parents' child runs (None: none)."""


def worker_runtime(
    backends: Backends,
    worker_id: str,
    *,
    switch: PowerSwitch | None = None,
    archive_batch_events: int = 1,
    registry: AgentRegistry | None = None,
) -> EngineServices:
    """A worker's runtime over ``backends`` (behind ``switch`` when given)."""
    switch = switch or PowerSwitch()

    def wrap(target: Any) -> Any:
        return Powered(target, switch)

    return EngineServices(
        settings=Settings(lease_ttl_ms=60_000, max_attempts=3, queue="tether"),
        runs=wrap(backends.runs),
        store=wrap(backends.store),
        archive=wrap(backends.archive),
        stream=wrap(backends.stream),
        leases=wrap(backends.leases),
        checkpoints=wrap(backends.checkpoints),
        registry=registry or AgentRegistry.default(entry_points_enabled=False),
        worker_id=worker_id,
        archive_hint=wrap(backends.hint),
        wake=lambda tenant, session_id: None,
        archive_batch_events=archive_batch_events,
        head_cache=None if backends.head_cache is None else wrap(backends.head_cache),
        # as build_services: on Redis, a step's events and its checkpoint go in one script
        step_marks=wrap(backends.stream) if isinstance(backends.stream, RedisEventStream) else None,
        waits=None if backends.waits is None else wrap(backends.waits),
        marks=None if backends.marks is None else wrap(backends.marks),
        signals=None if backends.signals is None else wrap(backends.signals),
        children=None if backends.children is None else wrap(backends.children),
    )


@contextmanager
def crash_at(
    step: CommitStep, phase: Phase, worker_id: str, switch: PowerSwitch
) -> Iterator[list[StepContext]]:
    """Kill ``worker_id`` the first time it reaches ``phase`` of ``step``; yields where it died."""
    fired: list[StepContext] = []
    lock = threading.Lock()

    def probe(ctx: StepContext) -> None:
        if ctx.worker_id != worker_id or ctx.step is not step or ctx.phase != phase:
            return
        with lock:
            if fired:
                return
            fired.append(ctx)
            switch.dead = True
        raise SimulatedCrash(f"{worker_id} died {phase} {step}")

    uninstall = install_probe(probe)
    try:
        yield fired
    finally:
        uninstall()


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

    store = InMemorySnapshotStore()
    store.head_cache = head_cache = InMemoryHeadCache(
        leases.current_fence, ttl_ms=HEAD_CACHE_TTL_MS, max_bytes=HEAD_CACHE_MAX_BYTES
    )
    waits = InMemoryWaitIndex()
    return Backends(
        name="memory",
        store=store,
        archive=InMemoryEventArchive(),
        stream=InMemoryEventStream(leases),
        leases=leases,
        runs=InMemoryRunQueue(leases, clock=clock),
        hint=DictHint(),
        checkpoints=InMemoryCheckpointStore(leases),
        expire_lease=expire,
        head_cache=head_cache,
        waits=waits,
        marks=BlobWaitMarks(store.blobs),
        signals=InMemorySignalMailbox(waits),
        children=InMemoryChildBook(),
    )


@pytest.hookimpl(tryfirst=True)  # before -m deselects the slow ones
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark slow a crash point outside REAL_BACKEND_POINTS on redis-server + S3."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        point = (params.get("step"), params.get("phase"))
        real = params.get("make_backends") == "redis+s3"
        if real and point[0] is not None and point not in REAL_BACKEND_POINTS:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(params=["memory", "redis+s3"])
def make_backends(request: pytest.FixtureRequest) -> Callable[[], Backends]:
    """In-memory backends, or redis-server + S3 over HTTP (moto): the same test runs on both."""
    if request.param == "memory":
        return memory_backends
    client: redis.Redis = request.getfixturevalue("redis_client")
    bucket = request.getfixturevalue("s3_bucket")
    return lambda: real_backends(client, bucket.bucket, bucket.endpoint_url)


def real_backends(client: redis.Redis, bucket: str, endpoint_url: str) -> Backends:
    """Backends on a real Redis and an S3 endpoint, in a fresh namespace and prefix."""
    keys = RedisKeys(f"crash-{new_id('c')[-8:]}")
    store, archive = open_storage(f"s3://{bucket}/{keys.prefix}", endpoint_url=endpoint_url)
    assert isinstance(store, BlobSnapshotStore)
    store.head_cache = head_cache = RedisHeadCache(
        client, keys, ttl_ms=HEAD_CACHE_TTL_MS, max_bytes=HEAD_CACHE_MAX_BYTES
    )
    return Backends(
        name="redis+s3",
        store=store,
        archive=archive,
        stream=RedisEventStream(client, keys=keys),
        leases=RedisLeaseManager(client, keys=keys),
        runs=RedisRunQueue(client, keys, result_ttl_s=3600),
        hint=RedisArchiveHint(client, keys),
        checkpoints=RedisCheckpointStore(client, keys, ttl_s=3600),
        expire_lease=lambda t, s: client.delete(keys.lease(t, s)),
        head_cache=head_cache,
        waits=RedisWaitIndex(client, keys),
        marks=BlobWaitMarks(store.blobs),
        signals=RedisSignalMailbox(client, keys),
        children=RedisChildBook(client, keys),
    )


TENANT = "acme"
_counter = itertools.count()


def session_request(session_id: str, agent: str, text: str) -> RunRequest:
    """The one run of ``agent`` on ``session_id`` a crash test submits, its run and request
    ids derived from the session (so a test names them without keeping them)."""
    return RunRequest(
        run_id=f"run-{session_id}",
        request_id=f"req-{session_id}",
        tenant=TENANT,
        session_id=session_id,
        agent=agent,
        input=text,
    )


def nap_request(session_id: str, seconds: float = 1) -> RunRequest:
    """A run of ``sleeper`` (:mod:`tests.support.wait_agents`) parking its session on a timer
    ``seconds`` away."""
    return session_request(session_id, "sleeper", f"nap {seconds}")


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
