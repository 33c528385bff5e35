"""Memory chunks of version-2 heads: writing, reading (through an LRU of parsed items) and
materializing a head's memory.

A chunk is immutable and named by its content (see :mod:`tether.persistence.objects`), so a
parsed chunk never goes stale: the cache needs no invalidation, only a bound.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import OrderedDict
from typing import Any

from tether.core.items import Item
from tether.core.memory import MemorySnapshot
from tether.core.snapshot import (
    SNAPSHOT_SCHEMA_VERSION,
    ChunkRef,
    SessionSnapshot,
    index_items,
)
from tether.errors import VersionConflict
from tether.persistence.blobs import BlobBackend
from tether.persistence.codec import dumps_items, loads_items, sha256_hex
from tether.persistence.objects import (
    CHUNK_KIND,
    INDEX_KIND,
    chunk_key,
    corrupt,
    seal,
    unseal,
)

CHUNK_CACHE_ENTRIES = 1024
"""Parsed chunks kept per store (64 items each by default: 65,536 items)."""


class ChunkCache:
    """A thread-safe LRU of parsed chunks, keyed by object key."""

    def __init__(self, max_entries: int = CHUNK_CACHE_ENTRIES) -> None:
        self._max_entries = max_entries
        # parsed chunks (items) and indexes (names), by object key
        self._entries: OrderedDict[str, tuple[Any, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[Any, ...] | None:
        with self._lock:
            items = self._entries.get(key)
            if items is not None:
                self._entries.move_to_end(key)
            return items

    def put(self, key: str, items: tuple[Any, ...]) -> None:
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

    def write_index(self, tenant: str, session_id: str, names: list[str]) -> str:
        """Store ``names`` (chunk names, oldest first) as one chunk index; return its name."""
        body = json.dumps(names, separators=(",", ":")).encode()
        last = ChunkRef.parse(names[-1])
        name = f"i{last.first + last.size:012d}-{len(names)}-{sha256_hex(body)[:16]}"
        key = chunk_key(tenant, session_id, name)
        with contextlib.suppress(VersionConflict):  # already there: the same bytes
            self.blobs.put(key, seal(INDEX_KIND, body), expected=None)
        self.cache.put(key, tuple(names))
        return name

    def read_index(self, tenant: str, session_id: str, name: str) -> tuple[str, ...]:
        """The chunk names of index ``name``, oldest first.

        Raises:
            SnapshotCorrupt: the index is missing, fails its checksum or does not parse.
        """
        key = chunk_key(tenant, session_id, name)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        where = self.blobs.describe(key)
        body = self._body(key, INDEX_KIND, where, name.rsplit("-", 1)[-1])
        try:
            names = tuple(ChunkRef.parse(n).name for n in json.loads(body))
        except (ValueError, TypeError, AttributeError, RecursionError) as exc:
            raise corrupt(INDEX_KIND, where, f"it is not a list of chunk names ({exc})") from exc
        last = ChunkRef.parse(names[-1]) if names else None
        if last is None or last.first + last.size != index_items(name):
            raise corrupt(INDEX_KIND, where, "its chunks do not hold the items its name says")
        self.cache.put(key, names)
        return names

    def _body(self, key: str, kind: str, where: str, digest: str) -> bytes:
        blob = self.blobs.get(key)
        if blob is None:
            raise corrupt(kind, where, "the head names it but it is missing")
        body = unseal(blob.data, kind, where=where).body
        if sha256_hex(body)[:16] != digest:
            raise corrupt(kind, where, "its content does not match its name")
        return body

    def names(self, snapshot: SessionSnapshot) -> list[str]:
        """Every chunk name of ``snapshot``, oldest first (its index's, then its own)."""
        indexed: tuple[str, ...] = ()
        if snapshot.memory_index is not None:
            indexed = self.read_index(snapshot.tenant, snapshot.session_id, snapshot.memory_index)
        return [*indexed, *snapshot.memory_chunks]

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
        ref = ChunkRef.parse(name)
        body = self._body(key, CHUNK_KIND, where, ref.digest)
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
        if not snapshot.is_chunked:
            return snapshot
        items: list[Item] = []
        for name in self.names(snapshot):
            items.extend(self.read(snapshot.tenant, snapshot.session_id, name))
        items.extend(snapshot.memory.items)
        memory = MemorySnapshot(items=tuple(items), summary=snapshot.memory.summary)
        return snapshot.model_copy(
            update={
                "memory": memory,
                "memory_chunks": [],
                "memory_index": None,
                "schema_version": SNAPSHOT_SCHEMA_VERSION,
            }
        )

    def stored(self, prefix: str) -> list[str]:
        """The object names under a session's chunk prefix (to delete them)."""
        return self.blobs.list_names(prefix)
