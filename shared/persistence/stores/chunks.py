"""Memory chunks of version-2 heads: writing, reading (through an LRU of parsed items) and
materializing a head's memory.

A chunk is immutable and named by its content (see :mod:`tether.persistence.objects`), so a
parsed chunk never goes stale: the cache needs no invalidation, only a bound.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict

from tether.core.items import Item
from tether.core.memory import MemorySnapshot
from tether.core.snapshot import SNAPSHOT_SCHEMA_VERSION, ChunkRef, SessionSnapshot
from tether.errors import VersionConflict
from tether.persistence.blobs import BlobBackend
from tether.persistence.codec import dumps_items, loads_items, sha256_hex
from tether.persistence.objects import CHUNK_KIND, chunk_key, corrupt, seal, unseal

CHUNK_CACHE_ENTRIES = 1024
"""Parsed chunks kept per store (64 items each by default: 65,536 items)."""


class ChunkCache:
    """A thread-safe LRU of parsed chunks, keyed by object key."""

    def __init__(self, max_entries: int = CHUNK_CACHE_ENTRIES) -> None:
        self._max_entries = max_entries
        self._entries: OrderedDict[str, tuple[Item, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[Item, ...] | None:
        with self._lock:
            items = self._entries.get(key)
            if items is not None:
                self._entries.move_to_end(key)
            return items

    def put(self, key: str, items: tuple[Item, ...]) -> None:
        with self._lock:
            self._entries[key] = items
            self._entries.move_to_end(key)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)


class ChunkStore:
    """The chunks of every session on one blob backend."""

    def __init__(self, blobs: BlobBackend, cache: ChunkCache | None = None) -> None:
        self.blobs = blobs
        self.cache = cache if cache is not None else ChunkCache()

    def write(self, tenant: str, session_id: str, first: int, items: tuple[Item, ...]) -> str:
        """Store ``items`` (memory items ``first`` onwards) as one chunk; return its name."""
        body = dumps_items(items)
        name = ChunkRef(first, len(items), sha256_hex(body)[:16]).name
        key = chunk_key(tenant, session_id, name)
        # already there: the same name is the same bytes (a racing or retried writer)
        with contextlib.suppress(VersionConflict):
            self.blobs.put(key, seal(CHUNK_KIND, body), expected=None)
        self.cache.put(key, items)
        return name

    def read(self, tenant: str, session_id: str, name: str) -> tuple[Item, ...]:
        """The items of chunk ``name``.

        Raises:
            SnapshotCorrupt: the chunk is missing, fails its checksum or does not parse.
        """
        key = chunk_key(tenant, session_id, name)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        where = self.blobs.describe(key)
        blob = self.blobs.get(key)
        if blob is None:
            raise corrupt(CHUNK_KIND, where, "the head names it but it is missing")
        body = unseal(blob.data, CHUNK_KIND, where=where).body
        ref = ChunkRef.parse(name)
        if sha256_hex(body)[:16] != ref.digest:
            raise corrupt(CHUNK_KIND, where, "its content does not match its name")
        items = loads_items(body, where=where)
        if len(items) != ref.size:
            raise corrupt(
                CHUNK_KIND, where, f"it holds {len(items)} items, its name says {ref.size}"
            )
        self.cache.put(key, items)
        return items

    def materialize(self, snapshot: SessionSnapshot) -> SessionSnapshot:
        """``snapshot`` with every chunk read into ``memory``: a version-1 value (unchanged when
        it has no chunks)."""
        if not snapshot.memory_chunks:
            return snapshot
        items: list[Item] = []
        for name in snapshot.memory_chunks:
            items.extend(self.read(snapshot.tenant, snapshot.session_id, name))
        items.extend(snapshot.memory.items)
        memory = MemorySnapshot(items=tuple(items), summary=snapshot.memory.summary)
        return snapshot.model_copy(
            update={
                "memory": memory,
                "memory_chunks": [],
                "schema_version": SNAPSHOT_SCHEMA_VERSION,
            }
        )

    def names(self, prefix: str) -> list[str]:
        """The object names under a session's chunk prefix (to delete them)."""
        return self.blobs.list_names(prefix)
