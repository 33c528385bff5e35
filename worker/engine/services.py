"""What a worker needs to execute runs: its seams (store, archive, stream, leases, run queue,
checkpoints), settings and agents. :func:`build_services` connects the production backends from
settings; tests build a :class:`EngineServices` from in-memory backends and run the same cycle
in-process.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis

from tether.keys import RedisKeys
from tether.persistence.archives.base import EventArchive
from tether.persistence.archives.redis_hint import RedisArchiveHint
from tether.persistence.deltas.redis import RedisDeltaChannel
from tether.persistence.headcache.base import HeadCache
from tether.persistence.headcache.redis import RedisHeadCache
from tether.persistence.redis_conn import redis_from_url
from tether.persistence.saving import ARCHIVE_BATCH_EVENTS, ArchiveHint
from tether.persistence.storage_url import open_storage
from tether.persistence.stores.base import SnapshotStore
from tether.persistence.stores.blob import BlobSnapshotStore
from tether.persistence.streams.base import EventStream
from tether.persistence.streams.redis import RedisEventStream
from tether.runs.contract import RunRequest, RunResult
from tether.runs.leases.base import LeaseManager
from tether.runs.leases.redis import RedisLeaseManager
from tether.runs.limits.gate import BudgetedModel
from tether.runs.limits.redis import RedisModelBudget
from tether.runs.queue.base import RunQueue
from tether.runs.queue.redis import RedisRunQueue
from tether.runs.signals.base import SignalMailbox
from tether.runs.signals.redis import RedisSignalMailbox
from tether.runs.waits.base import WaitIndex
from tether.runs.waits.children import ChildBook
from tether.runs.waits.children_redis import RedisChildBook
from tether.runs.waits.marks import BlobWaitMarks
from tether.runs.waits.redis import RedisWaitIndex
from tether.runtime.registry import AgentRegistry
from tether.settings import Settings, load_settings
from tether.worker.engine.checkpoints.base import CheckpointStore, MarkingStream
from tether.worker.engine.checkpoints.redis import RedisCheckpointStore
from tether.worker.engine.claim import Claimer, SequentialClaimer
from tether.worker.engine.claim_redis import RedisClaimer
from tether.worker.engine.deltas import DeltaPublisher
from tether.worker.engine.guard import NoGuard, RunGuard
from tether.worker.engine.turns import ModelTurns


@dataclass
class EngineServices:
    """Everything the drain cycle needs, as seams."""

    settings: Settings
    runs: RunQueue
    store: SnapshotStore
    archive: EventArchive
    stream: EventStream
    leases: LeaseManager
    checkpoints: CheckpointStore
    registry: AgentRegistry
    worker_id: str
    archive_hint: ArchiveHint | None
    wake: Callable[[str, str], None]
    """Have a worker drain ``(tenant, session_id)`` soon (the Celery worker sends a drain task)."""
    wake_many: Callable[[Sequence[tuple[str, str]], str], None] | None = None
    """Have workers of a queue drain these ``(tenant, session_id)`` soon, in one publish (the
    children a run spawned); None: :attr:`wake` each."""
    archive_batch_events: int = ARCHIVE_BATCH_EVENTS
    """Archive a head's outbox as one segment once it holds this many events."""
    draining: Callable[[], bool] = lambda: False
    """True once this worker is shutting down: runs with step checkpoints are handed back at
    their next step boundary, and no new run is started."""
    guard: RunGuard = field(default_factory=NoGuard)
    """Tells a guardian outside this process which lease to keep alive and when to give up on
    the run (see :mod:`tether.worker.engine.guard`); a no-op by default."""
    head_cache: HeadCache | None = None
    """The cached heads ``store`` reads first (:mod:`tether.persistence.headcache`); the drain
    drops a session's entry where its writes may have bypassed it."""
    deltas: DeltaPublisher | None = None
    """Publishes the pieces of streamed model answers (None: models answer with ``complete``,
    as in-process)."""
    on_finished: Callable[[RunRequest, RunResult], None] | None = None
    """Told of every run the drain finished, after its result is committed (the Celery worker
    sends its webhook); its errors are logged, never raised."""
    model_turns: ModelTurns | None = None
    """Whether a run about to start should leave its worker to another tenant owed the next
    turn of a shared model limit (:mod:`tether.worker.engine.turns`); None: no model limits."""
    step_marks: MarkingStream | None = None
    """The stream that also records step checkpoints, each with the events before it in one
    script (one round trip, one AOF write per step boundary): ``stream`` itself when it and
    ``checkpoints`` are on one Redis with the same keys (what :func:`build_services` builds);
    None: an append, then ``checkpoints.save``."""
    waits: WaitIndex | None = None
    """The wait records and timers index of calls parked on the fleet (None: runs that park a
    call end ``WAITING`` and only an outside answer goes on with them)."""
    marks: BlobWaitMarks | None = None
    """The durable marks of waiting sessions, beside their heads (None: a Redis that loses the
    index loses the waits)."""
    signals: SignalMailbox | None = None
    """The sessions' mailboxes of signals (None: a tool's wait for a signal only parks, and an
    outside answer goes on with it)."""
    children: ChildBook | None = None
    """Parents' child runs and how they ended, and child sessions' links to their parents
    (None: ``ctx.spawn`` fails the call: no fleet to spawn on)."""
    claimer: Claimer | None = None
    """Claim-and-begin in one round trip (:mod:`tether.worker.engine.claim`); None: the same steps
    as separate calls on ``runs``, ``leases`` and ``checkpoints``."""

    def claims(self) -> Claimer:
        """The claimer of these services (see :attr:`claimer`)."""
        if self.claimer is None:  # built per call: tests swap the seams of built services
            return SequentialClaimer(self.runs, self.leases, self.checkpoints, self.head_cache)
        return self.claimer


def default_worker_id() -> str:
    """``host:pid:thread``: unique per executing thread, readable in logs and run records."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident() % 100000}"


def build_services(
    wake: Callable[[str, str], None], settings: Settings | None = None
) -> EngineServices:
    """Connect the production backends from settings (environment when None)."""
    settings = settings or load_settings()
    client = redis_from_url(settings.effective_redis_url)
    keys = RedisKeys(settings.namespace)
    store, archive = open_storage(
        settings.store_url,
        endpoint_url=settings.s3_endpoint_url,
        region_name=settings.s3_region,
        sse=settings.s3_sse,
        sse_kms_key_id=settings.s3_kms_key_id,
    )
    runs = RedisRunQueue(client, keys, result_ttl_s=settings.result_ttl_s)
    head_cache = _head_cache(client, keys, settings, store)
    registry, model_turns = _registry(client, keys, settings)
    deltas = _deltas(client, keys, settings)
    stream = RedisEventStream(
        client, keys=keys, max_len=settings.stream_max_len, retention_s=settings.stream_retention_s
    )
    return EngineServices(
        settings=settings,
        deltas=deltas,
        runs=runs,
        store=store,
        archive=archive,
        stream=stream,
        step_marks=stream,
        leases=RedisLeaseManager(client, keys=keys),
        checkpoints=RedisCheckpointStore(client, keys, ttl_s=settings.result_ttl_s),
        registry=registry,
        worker_id=default_worker_id(),
        archive_hint=RedisArchiveHint(client, keys, ttl_s=settings.result_ttl_s),
        wake=wake,
        archive_batch_events=settings.archive_batch_events,
        claimer=RedisClaimer(client, keys, runs, head_cache=head_cache is not None),
        head_cache=head_cache,
        model_turns=model_turns,
        waits=RedisWaitIndex(client, keys),
        marks=BlobWaitMarks(store.blobs) if isinstance(store, BlobSnapshotStore) else None,
        signals=RedisSignalMailbox(client, keys),
        children=RedisChildBook(client, keys),
    )


def _head_cache(
    client: redis.Redis, keys: RedisKeys, settings: Settings, store: SnapshotStore
) -> HeadCache | None:
    """The cached heads ``store`` reads first, when ``TETHER_HEAD_CACHE_TTL_S`` turns them on
    (blob stores only)."""
    if settings.head_cache_ttl_s <= 0 or not isinstance(store, BlobSnapshotStore):
        return None
    head_cache = RedisHeadCache(
        client,
        keys,
        ttl_ms=settings.head_cache_ttl_s * 1000,
        max_bytes=settings.head_cache_max_bytes,
    )
    store.head_cache = head_cache
    return head_cache


def _registry(
    client: redis.Redis, keys: RedisKeys, settings: Settings
) -> tuple[AgentRegistry, ModelTurns | None]:
    """The configured agents, their models behind the fleet-wide budget when
    ``TETHER_MODEL_LIMITS`` sets one, and the drain's check of the tenants' turns at it."""
    registry = AgentRegistry.default(settings.agent_modules)
    limits = settings.limits()
    if not limits.root:  # only then does a model call cost a round trip (to its budget)
        return registry, None
    budget = RedisModelBudget(client, keys)
    registry.wrap_models(lambda model: BudgetedModel(model, budget, limits))
    return registry, ModelTurns(budget, limits)


def _deltas(client: redis.Redis, keys: RedisKeys, settings: Settings) -> DeltaPublisher | None:
    """The publisher of streamed pieces (None: ``TETHER_DELTA_MAX_LEN=0`` turns streaming off)."""
    if settings.delta_max_len <= 0:
        return None
    channel = RedisDeltaChannel(
        client, keys, max_len=settings.delta_max_len, ttl_ms=settings.delta_ttl_s * 1000
    )
    return DeltaPublisher(channel)
