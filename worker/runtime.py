"""Per-process worker state: settings, Redis, stores, stream, leases and the agent registry.

Built lazily on first use and rebuilt after ``fork`` (prefork pool children must not share the
parent's sockets), so importing this module has no side effects.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass

import redis

from shared.archive import EventArchive
from shared.keys import RedisKeys
from shared.lease import LeaseManager
from shared.leases.redis import RedisLeaseManager
from shared.redis_conn import redis_from_url
from shared.registry import AgentRegistry
from shared.runbook import RedisArchiveHint, RunBook
from shared.settings import Settings, load_settings
from shared.storage_url import open_storage
from shared.store import SnapshotStore
from shared.stream import EventStream
from shared.streams.redis import RedisEventStream


@dataclass
class Runtime:
    """Everything a worker process needs to execute runs."""

    settings: Settings
    redis: redis.Redis
    keys: RedisKeys
    runbook: RunBook
    store: SnapshotStore
    archive: EventArchive
    stream: EventStream
    leases: LeaseManager
    registry: AgentRegistry
    worker_id: str
    archive_hint: RedisArchiveHint


def build_runtime(settings: Settings | None = None) -> Runtime:
    """Connect everything from settings (environment when None)."""
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
    return Runtime(
        settings=settings,
        redis=client,
        keys=keys,
        runbook=RunBook(client, keys, result_ttl_s=settings.result_ttl_s),
        store=store,
        archive=archive,
        stream=RedisEventStream(client, keys=keys, max_len=settings.stream_max_len),
        leases=RedisLeaseManager(client, keys=keys),
        registry=AgentRegistry.default(settings.agent_modules),
        worker_id=f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident() % 100000}",
        archive_hint=RedisArchiveHint(client, keys, ttl_s=settings.result_ttl_s),
    )


_runtime: Runtime | None = None
_runtime_pid: int | None = None
_lock = threading.Lock()


def get_runtime() -> Runtime:
    """This process's runtime (built on first call, rebuilt in a forked child)."""
    global _runtime, _runtime_pid
    with _lock:
        if _runtime is None or _runtime_pid != os.getpid():
            _runtime = build_runtime()
            _runtime_pid = os.getpid()
        return _runtime
