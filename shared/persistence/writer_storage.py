"""Storage for a writer outside a lease (the CLI, ``TetherSession``, an in-process save): the
store and archive of the settings, with the head cache as such a writer sees it: it only ever
drops the entry.

Why: the cache holds the newest head a lease holder wrote (see
:mod:`tether.persistence.headcache.base`). Any other write to the store (a ``TetherSession``, an
in-process ``AgentSession.save``, ``tether sessions fork/delete``, an operator restoring a backup)
makes that entry stale; a run that then starts from it loses its compare-and-set and is redone.
A writer without a lease may not fill the entry (it could race a holder's fill), so it drops it:
:func:`attach_writer_cache` gives a store a :class:`DroppingHeadCache`, and the store's ``save``
and ``delete`` drop the entry after writing.

A failed drop is logged, not raised: the write itself succeeded, and a run that starts from a
stale entry after all loses its compare-and-set and is retried from the store at once
(:mod:`tether.worker.engine.cycle`), under the same tool idempotency keys.
"""

from __future__ import annotations

import logging
from typing import Protocol

from tether.errors import InfrastructureError, SettingsError
from tether.keys import RedisKeys
from tether.persistence.archives.base import EventArchive
from tether.persistence.blobs.s3 import SseMode
from tether.persistence.headcache.base import CachedHead, HeadCache
from tether.persistence.headcache.redis import RedisHeadCache
from tether.persistence.redis_conn import redis_from_url
from tether.persistence.storage_url import open_storage
from tether.persistence.stores.base import SnapshotStore
from tether.persistence.stores.blob import BlobSnapshotStore

log = logging.getLogger(__name__)


class WriterSettings(Protocol):
    """What this module reads of :class:`tether.settings.Settings` (persistence sits below the
    settings' layer, so it names the fields instead of importing the class)."""

    @property
    def store_url(self) -> str: ...
    @property
    def s3_endpoint_url(self) -> str | None: ...
    @property
    def s3_region(self) -> str | None: ...
    @property
    def s3_sse(self) -> SseMode | None: ...
    @property
    def s3_kms_key_id(self) -> str | None: ...
    @property
    def effective_redis_url(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def head_cache_ttl_s(self) -> int: ...
    @property
    def head_cache_max_bytes(self) -> int: ...


class DroppingHeadCache:
    """A :class:`HeadCache` for writers without a lease: reads miss, ``put`` drops."""

    def __init__(self, inner: HeadCache) -> None:
        self._inner = inner

    def get(self, tenant: str, session_id: str) -> CachedHead | None:
        return None  # outside a lease the store's copy is the truth

    def put(
        self, tenant: str, session_id: str, data: bytes, version: str, writer_fence: int
    ) -> bool:
        self.drop(tenant, session_id)
        return False

    def drop(self, tenant: str, session_id: str) -> None:
        try:
            self._inner.drop(tenant, session_id)
        except InfrastructureError as exc:
            log.warning(
                "could not drop the cached head of %s/%s (the next run of the session may be "
                "redone once from the store): %s",
                tenant,
                session_id,
                exc,
            )


def attach_writer_cache(store: SnapshotStore, settings: WriterSettings) -> SnapshotStore:
    """``store``, dropping the deployment's cached head on every write (when the settings have
    a head cache and the store can hold one, and name a Redis: without one there are no workers
    whose cache a write could leave stale); returns it for chaining. No I/O."""
    if settings.head_cache_ttl_s > 0 and isinstance(store, BlobSnapshotStore):
        try:
            url = settings.effective_redis_url
        except SettingsError:
            return store
        client = redis_from_url(url)
        inner = RedisHeadCache(
            client,
            RedisKeys(settings.namespace),
            ttl_ms=settings.head_cache_ttl_s * 1000,
            max_bytes=settings.head_cache_max_bytes,
        )
        store.head_cache = DroppingHeadCache(inner)
    return store


def open_writer_storage(
    settings: WriterSettings, *, url: str | None = None
) -> tuple[SnapshotStore, EventArchive]:
    """The store and archive the settings name (``url`` instead of ``TETHER_STORE_URL`` when
    given), the store dropping the cached head on every write: what an in-process writer of a
    deployment (``TetherSession.from_settings``, the ``tether`` CLI, the console) opens. No I/O.
    """
    store, archive = open_storage(
        settings.store_url if url is None else url,
        endpoint_url=settings.s3_endpoint_url,
        region_name=settings.s3_region,
        sse=settings.s3_sse,
        sse_kms_key_id=settings.s3_kms_key_id,
    )
    return attach_writer_cache(store, settings), archive
