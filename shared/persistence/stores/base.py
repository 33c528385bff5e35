"""The snapshot-store seam: versioned session heads with compare-and-set writes.

Implementations live in :mod:`tether.persistence.stores` (``memory``, ``local`` directory, ``s3``)
and all
pass ``tests/test_store_contract.py``. Versions are opaque strings (an S3 ETag, a counter...).
A loaded head never contains the whole event history; see
:class:`tether.core.snapshot.SessionSnapshot`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from tether.core.events import AgentEvent
from tether.core.items import Item
from tether.core.snapshot import HeadMemory, SessionSnapshot
from tether.persistence.headcache.base import CachedHead


class StoredSnapshot(NamedTuple):
    """A snapshot with the version it was stored under."""

    snapshot: SessionSnapshot
    version: str


@runtime_checkable
class SnapshotStore(Protocol):
    """Versioned storage of session heads, scoped by tenant."""

    def load(self, tenant: str, session_id: str) -> StoredSnapshot | None:
        """The head and its version, or None when the session does not exist.

        Raises:
            InvalidId: a malformed tenant or session id (before any I/O).
            SnapshotCorrupt: the stored bytes fail their checksum or do not parse.
            UnsupportedSchemaVersion: the head was written by an unknown format version.
        """

    def load_known(
        self, tenant: str, session_id: str, cached: CachedHead | None
    ) -> StoredSnapshot | None:
        """:meth:`load`, given what the session's head cache holds (``cached``; None: nothing),
        as the caller already read it: the lease claim reads it in the same round trip (see
        :mod:`tether.persistence.headcache`). Never reads the cache itself; an entry that does
        not decode is dropped and the store read instead.

        Raises:
            The errors of :meth:`load`.
        """

    def load_shallow(self, tenant: str, session_id: str) -> StoredSnapshot | None:
        """:meth:`load` without reading the memory chunks of a version-2 head: its
        ``memory.items`` are only the items after ``memory_chunks`` (see
        :class:`tether.core.snapshot.SessionSnapshot`). For writers that append to memory
        without reading all of it.

        Raises:
            The errors of :meth:`load`.
        """

    def load_memory(self, tenant: str, session_id: str) -> HeadMemory | None:
        """The memory part of the head as :meth:`load_shallow` returns it (chunks by name),
        without parsing the rest: for readers of memory items. None: no such session.

        Raises:
            The errors of :meth:`load`.
        """

    def read_chunk(self, tenant: str, session_id: str, name: str) -> tuple[Item, ...]:
        """The items of one memory chunk named by a head (cached: chunks are immutable).

        Raises:
            SnapshotCorrupt: the chunk is missing, fails its checksum or does not parse.
        """

    def write_chunk(self, tenant: str, session_id: str, first: int, items: tuple[Item, ...]) -> str:
        """Store memory items ``first`` onwards as one immutable chunk; return its name for
        ``memory_chunks``. Idempotent: the name is derived from the content. Write it before
        the head that names it."""

    def chunk_names(self, tenant: str, session_id: str, index: str) -> tuple[str, ...]:
        """The chunk names a head's ``memory_index`` lists, oldest first (cached: immutable).

        Raises:
            SnapshotCorrupt: the index is missing, fails its checksum or does not parse.
        """

    def write_chunk_index(self, tenant: str, session_id: str, names: list[str]) -> str:
        """Store chunk names (oldest first) as one immutable index; return its name for
        ``memory_index``. Idempotent, like :meth:`write_chunk`; write it before the head."""

    def save(self, snapshot: SessionSnapshot, expected_version: str | None) -> str:
        """Write the head if the stored version equals ``expected_version``; return the new one.

        ``expected_version=None`` means the session must not exist yet.

        Raises:
            VersionConflict: the stored version differs; nothing was written.
        """

    def delete(self, tenant: str, session_id: str) -> bool:
        """Delete the head and its memory chunks; True when the head was deleted."""

    def list_session_ids(
        self, tenant: str, *, after: str | None = None, limit: int = 1000
    ) -> list[str]:
        """Session ids of ``tenant``, ascending, greater than ``after``, at most ``limit``."""


@runtime_checkable
class JournalingStore(Protocol):
    """A store that may keep appends to a head as patches (see
    :mod:`tether.persistence.journal`): the Agents SDK session's fast path. Every
    :class:`~tether.persistence.stores.blob.BlobSnapshotStore` has these methods;
    :attr:`journals` says whether its backend keeps journals (the local store's does)."""

    @property
    def journals(self) -> bool:
        """Whether :meth:`append_events` may store an append as a patch here."""

    def head_version(self, tenant: str, session_id: str) -> str | None:
        """The version of the stored head without parsing it (None: no such session)."""

    def load_memory_version(self, tenant: str, session_id: str) -> tuple[HeadMemory, str] | None:
        """:meth:`SnapshotStore.load_memory` and the version it read."""

    def append_events(
        self,
        tenant: str,
        session_id: str,
        events: Sequence[AgentEvent],
        *,
        updated_at_ms: int,
        expected_version: str,
    ) -> str | None:
        """Store ``events`` (each a ``MEMORY_ITEMS_APPENDED`` continuing the head) as a patch of
        the head at ``expected_version``; return the new version, or None (nothing written)
        when a patch cannot be taken now: save the whole head then.

        Raises:
            VersionConflict: the stored version differs; nothing was written.
        """


def iter_session_ids(store: SnapshotStore, tenant: str, *, page_size: int = 1000) -> list[str]:
    """Every session id of ``tenant``, walking the pages."""
    out: list[str] = []
    after: str | None = None
    while True:
        page = store.list_session_ids(tenant, after=after, limit=page_size)
        out.extend(page)
        if len(page) < page_size:
            return out
        after = page[-1]
