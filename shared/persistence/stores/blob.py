"""The snapshot store written once over any :class:`tether.persistence.blobs.BlobBackend`."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tether.core.events import AgentEvent
from tether.core.items import Item
from tether.core.snapshot import HeadMemory, SessionSnapshot
from tether.errors import DataError, InfrastructureError, InvalidInput, VersionConflict
from tether.ids import is_valid_id, validate_id
from tether.persistence.blobs import BlobBackend
from tether.persistence.codec import dumps_snapshot, loads_head_memory, loads_snapshot
from tether.persistence.headcache.base import CachedHead, HeadCache
from tether.persistence.journal import encode_patch, fold_memory, fold_snapshot
from tether.persistence.objects import (
    EVENTS_DIR,
    HEAD_KIND,
    HEAD_NAME,
    check_limit,
    corrupt,
    head_key,
    items_dir,
    seal,
    tenant_dir,
    unseal,
)
from tether.persistence.stores.base import StoredSnapshot
from tether.persistence.stores.chunks import ChunkStore

log = logging.getLogger(__name__)


class BlobSnapshotStore:
    """A :class:`tether.persistence.stores.base.SnapshotStore` keeping each head as one checksummed
    object.

    Ids are validated before any I/O; the compare-and-set and the version tokens come from the
    backend (see :mod:`tether.persistence.blobs`). A version-2 head's memory chunks are
    separate immutable objects (see :mod:`tether.persistence.stores.chunks`); the version is
    the head's alone, since chunks never change.
    """

    def __init__(self, blobs: BlobBackend) -> None:
        """Args:
        blobs: the backend holding the objects.
        """
        self.blobs = blobs
        #: A copy of each head beside the lease (see :mod:`tether.persistence.headcache`):
        #: loads read it first; saves by a lease holder fill it, every other save drops it.
        self.head_cache: HeadCache | None = None
        self.chunks = ChunkStore(blobs)

    def load(self, tenant: str, session_id: str) -> StoredSnapshot | None:
        key = head_key(tenant, session_id)  # validates the ids before any I/O
        stored = self._load(tenant, session_id, key, self._cache_get(tenant, session_id))
        return self._materialize(stored)

    def load_known(
        self, tenant: str, session_id: str, cached: CachedHead | None
    ) -> StoredSnapshot | None:
        stored = self._load(tenant, session_id, head_key(tenant, session_id), cached)
        return self._materialize(stored)

    def load_shallow(self, tenant: str, session_id: str) -> StoredSnapshot | None:
        key = head_key(tenant, session_id)
        return self._load(tenant, session_id, key, self._cache_get(tenant, session_id))

    def load_memory(self, tenant: str, session_id: str) -> HeadMemory | None:
        loaded = self.load_memory_version(tenant, session_id)
        return None if loaded is None else loaded[0]

    def load_memory_version(self, tenant: str, session_id: str) -> tuple[HeadMemory, str] | None:
        key = head_key(tenant, session_id)
        cached = self._cache_get(tenant, session_id)
        if cached is not None:
            try:
                head = self._decode_memory(tenant, session_id, key, cached.data)
                return head, cached.version
            except DataError as exc:  # the store's copy decides, as in _decode_cached
                log.warning("cached head of %s/%s does not decode: %s", tenant, session_id, exc)
                self._drop(tenant, session_id)
        current = self._get(key)
        if current is None:
            return None
        data, patches, version = current
        head = self._decode_memory(tenant, session_id, key, data)
        return fold_memory(head, patches, where=self.blobs.describe(key)), version

    def _get(self, key: str) -> tuple[bytes, tuple[bytes, ...], str] | None:
        """The newest full bytes of ``key``, the patches after them and the version."""
        get_journal = getattr(self.blobs, "get_journal", None)
        if get_journal is not None:
            journal = get_journal(key)
            return None if journal is None else (journal.full, journal.patches, journal.token)
        blob = self.blobs.get(key)
        return None if blob is None else (blob.data, (), blob.token)

    @property
    def journals(self) -> bool:
        return getattr(self.blobs, "journal", None) is not None

    def head_version(self, tenant: str, session_id: str) -> str | None:
        key = head_key(tenant, session_id)
        token = getattr(self.blobs, "token", None)
        if token is not None:
            version: str | None = token(key)
            return version
        current = self._get(key)
        return None if current is None else current[2]

    def append_events(
        self,
        tenant: str,
        session_id: str,
        events: Sequence[AgentEvent],
        *,
        updated_at_ms: int,
        expected_version: str,
    ) -> str | None:
        key = head_key(tenant, session_id)
        append_patch = getattr(self.blobs, "append_patch", None)
        if append_patch is None:
            return None
        change = encode_patch(events, updated_at_ms)
        try:
            version: str | None = append_patch(key, change, expected=expected_version)
        except VersionConflict:
            self._drop(tenant, session_id)  # whatever the writer read may have come from it
            raise
        if version is not None and self.head_cache is not None:
            # an older copy must not outlive this write (see _cache: a failure raises)
            self.head_cache.drop(tenant, session_id)
        return version

    def _decode_memory(self, tenant: str, session_id: str, key: str, data: bytes) -> HeadMemory:
        where = self.blobs.describe(key)
        head = loads_head_memory(unseal(data, HEAD_KIND, where=where).body, where=where)
        if head.metadata.tenant != tenant or head.metadata.session_id != session_id:
            raise corrupt(
                HEAD_KIND,
                where,
                f"it holds tenant {head.metadata.tenant!r} session {head.metadata.session_id!r} "
                "(was it copied from another location?)",
            )
        return head

    def read_chunk(self, tenant: str, session_id: str, name: str) -> tuple[Item, ...]:
        return self.chunks.read(tenant, session_id, name)

    def chunk_names(self, tenant: str, session_id: str, index: str) -> tuple[str, ...]:
        return self.chunks.read_index(tenant, session_id, index)

    def write_chunk_index(self, tenant: str, session_id: str, names: list[str]) -> str:
        head_key(tenant, session_id)  # validates the ids before any I/O
        return self.chunks.write_index(tenant, session_id, names)

    def write_chunk(self, tenant: str, session_id: str, first: int, items: tuple[Item, ...]) -> str:
        head_key(tenant, session_id)  # validates the ids before any I/O
        return self.chunks.write(tenant, session_id, first, items)

    def _materialize(self, stored: StoredSnapshot | None) -> StoredSnapshot | None:
        if stored is None or not stored.snapshot.is_chunked:
            return stored
        return StoredSnapshot(self.chunks.materialize(stored.snapshot), stored.version)

    def _load(
        self, tenant: str, session_id: str, key: str, cached: CachedHead | None
    ) -> StoredSnapshot | None:
        if cached is not None:
            known = self._decode_cached(tenant, session_id, key, cached)
            if known is not None:
                return known
        current = self._get(key)
        if current is None:
            return None
        data, patches, version = current
        stored = self._decode(tenant, session_id, key, data, version)
        if not patches:
            return stored
        where = self.blobs.describe(key)
        return StoredSnapshot(fold_snapshot(stored.snapshot, patches, where=where), version)

    def _decode(
        self, tenant: str, session_id: str, key: str, data: bytes, version: str
    ) -> StoredSnapshot:
        where = self.blobs.describe(key)
        body = unseal(data, HEAD_KIND, where=where).body
        snapshot = loads_snapshot(body, where=where)
        if snapshot.tenant != tenant or snapshot.session_id != session_id:
            raise corrupt(
                HEAD_KIND,
                where,
                f"it holds tenant {snapshot.tenant!r} session {snapshot.session_id!r} (was it "
                "copied from another location?)",
            )
        return StoredSnapshot(snapshot, version)

    def _cache_get(self, tenant: str, session_id: str) -> CachedHead | None:
        """The cached head, or None (no cache, a miss, or the cache unreachable: the store's
        copy decides then, so the cache never fails a run)."""
        if self.head_cache is None:
            return None
        try:
            return self.head_cache.get(tenant, session_id)
        except InfrastructureError as exc:
            log.warning(
                "head cache unreadable for %s/%s, reading the store: %s", tenant, session_id, exc
            )
            return None

    def _decode_cached(
        self, tenant: str, session_id: str, key: str, hit: CachedHead
    ) -> StoredSnapshot | None:
        """``hit`` decoded, or None (dropped) when it does not decode: the store's copy
        decides then."""
        try:
            return self._decode(tenant, session_id, key, hit.data, hit.version)
        except DataError as exc:
            log.warning(
                "cached head of %s/%s does not decode, reading the store: %s",
                tenant,
                session_id,
                exc,
            )
            self._drop(tenant, session_id)
        return None

    def _drop(self, tenant: str, session_id: str) -> None:
        """Drop the cached head; best effort (the caller's next step does not depend on it)."""
        if self.head_cache is None:
            return
        try:
            self.head_cache.drop(tenant, session_id)
        except InfrastructureError as exc:
            log.warning("could not drop the cached head of %s/%s: %s", tenant, session_id, exc)

    def save(self, snapshot: SessionSnapshot, expected_version: str | None) -> str:
        tenant, session_id = snapshot.tenant, snapshot.session_id
        key = head_key(tenant, session_id)
        if expected_version is not None and not isinstance(expected_version, str):
            raise InvalidInput(
                f"expected_version must be a version string or None, got {expected_version!r}"
            )
        data = seal(HEAD_KIND, dumps_snapshot(snapshot))
        try:
            version = self.blobs.put(key, data, expected=expected_version)
        except VersionConflict:
            self._drop(tenant, session_id)  # whatever the writer read may have come from it
            raise
        if self.head_cache is not None:
            self._cache(snapshot, data, version)
        return version

    def _cache(self, snapshot: SessionSnapshot, data: bytes, version: str) -> None:
        """Fill the cache with the head just written, or drop a now older entry.

        Raises:
            InfrastructureError: neither worked, so an older entry may survive; the caller must
                not hand the session on as if it finished cleanly.
        """
        assert self.head_cache is not None
        tenant, session_id = snapshot.tenant, snapshot.session_id
        try:
            self.head_cache.put(tenant, session_id, data, version, snapshot.writer_fence)
        except InfrastructureError as exc:
            log.warning("could not cache the head of %s/%s: %s", tenant, session_id, exc)
            self.head_cache.drop(tenant, session_id)

    def delete(self, tenant: str, session_id: str) -> bool:
        key = head_key(tenant, session_id)
        if self.head_cache is not None:
            self.head_cache.drop(tenant, session_id)  # first: a failure leaves both in place
        # chunks before the head: a crash in between leaves a head that fails to load (and a
        # second delete finishes), never chunks that outlive their session unnoticed
        prefix = items_dir(tenant, session_id)
        names = self.chunks.stored(prefix)
        if names:
            self.blobs.delete_many([prefix + name for name in names])
        return self.blobs.delete(key)

    def list_session_ids(
        self, tenant: str, *, after: str | None = None, limit: int = 1000
    ) -> list[str]:
        prefix = tenant_dir(tenant)
        if after is not None:
            validate_id(after, kind="'after' session id")
        limit = check_limit(limit)
        out: list[str] = []
        while True:
            want = limit - len(out)
            page = self.blobs.list_children(
                prefix, HEAD_NAME, rollup=EVENTS_DIR, after=after, limit=want
            )
            for name in page:
                if is_valid_id(name):
                    out.append(name)
                else:
                    # an object put there by hand (or by a tenant with write access to its
                    # prefix): no session of Tether's, and one such name must not stop every
                    # listing, the console's sessions page and a tenant's purge
                    log.warning("skipped %r under %s: not a session id", name[:80], prefix)
            if len(page) < want or len(out) >= limit:
                return out
            after = page[-1]  # raw: the next page starts after the skipped name too
