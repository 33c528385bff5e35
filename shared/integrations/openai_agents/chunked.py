"""A :class:`~tether.integrations.openai_agents.TetherSession` write on a shallow head: the
session holds only the memory items after the head's chunks, and the newest items are sealed
into chunks as they accumulate, so a write costs the same at 100 and 10,000 items.

The live :class:`~tether.runtime.session.AgentSession` sees only that suffix of memory. Its
writes stay correct on it: an append adds at the end, a removal of ``count`` items removes the
last ones (a pop or clear first pulls enough chunks back into the suffix, see
:meth:`ChunkedWrite.load`). The events it emits are the same as on the whole memory, so folding
the log still gives the memory (chunks + suffix).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from tether.core.events import AgentEvent, ItemsAppendedPayload
from tether.core.items import Item
from tether.core.memory import MemorySnapshot
from tether.core.snapshot import CHUNKED_SNAPSHOT_SCHEMA_VERSION, ChunkRef, SessionSnapshot
from tether.integrations.openai_agents.items import SdkItem, from_memory
from tether.persistence.saving import ARCHIVE_BATCH_EVENTS
from tether.persistence.stores.base import SnapshotStore, StoredSnapshot
from tether.runtime.session import AgentSession
from tether.runtime.session_memory import last_items

CHUNK_ITEMS = 64
"""Memory items per sealed chunk. The head keeps the newest items unsealed: up to twice this
many, then all but the last ``CHUNK_ITEMS`` are sealed (one chunk per ``CHUNK_ITEMS`` appends)."""

INDEX_FANOUT = 16
"""Chunk names a head lists itself: up to twice this many, then all but the last
``INDEX_FANOUT`` move into a new chunk index (one index per ``INDEX_FANOUT`` chunks), so a head
stays the same size however long the session."""

JOURNAL_ARCHIVE_BATCH_EVENTS = CHUNK_ITEMS
"""The archiving threshold of a ``TetherSession`` on a store that journals: with one event per
one-item append, its outbox fills on the append that seals a chunk (which archives it anyway),
so one append in ``CHUNK_ITEMS`` writes files (a chunk, a segment, the head whole) and all others
one patch record; at :data:`ARCHIVE_BATCH_EVENTS` a second one would, halfway. Elsewhere every
write stores the whole head, and the default batch stands."""


Pull = Literal["none", "last", "all"]
"""How many chunks a write needs back in the session's memory: none (append), the last one
when the unsealed items are empty (pop), all of them (clear)."""


def unseal(
    store: SnapshotStore, stored: StoredSnapshot, pull: Pull
) -> tuple[SessionSnapshot, list[str], str | None]:
    """``stored``'s head as a version-1 value holding the unsealed items (plus the chunks that
    ``pull`` asks for), the names of the chunks still sealed before them that the head lists
    itself, and its chunk index."""
    head = stored.snapshot
    if not head.is_chunked:
        return head, [], None
    chunks, index = list(head.memory_chunks), head.memory_index
    pulled: list[Item] = []
    if pull == "all" or (pull == "last" and not head.memory.items):
        if index is not None:  # rare (a pop past the unsealed items): list every chunk
            chunks = [*store.chunk_names(head.tenant, head.session_id, index), *chunks]
            index = None
        keep = 0 if pull == "all" else len(chunks) - 1
        take, chunks = chunks[keep:], chunks[:keep]
        for name in take:
            pulled.extend(store.read_chunk(head.tenant, head.session_id, name))
    # items read from chunks and a parsed head are validated already
    memory = MemorySnapshot.model_construct(
        items=(*pulled, *head.memory.items), summary=head.memory.summary
    )
    update = {"memory": memory, "memory_chunks": [], "memory_index": None, "schema_version": 1}
    return head.model_copy(update=update), chunks, index


@dataclass
class ChunkedWrite:
    """A :class:`tether.persistence.saving.Saveable`: ``session`` (memory after ``chunks``)
    saved as a head naming ``chunks``, after :meth:`seal` moved its older items into new ones."""

    session: AgentSession
    chunks: list[str] = field(default_factory=list)
    index: str | None = None
    sealed: int = 0
    """How many of the session's first memory items :meth:`seal` moved into chunks."""
    last_snapshot: SessionSnapshot | None = None
    """The head :meth:`snapshot` gave last (the one a save wrote, once it succeeded)."""
    stored_batch: int = 0
    """The archiving threshold recorded by the stored head this write started from."""
    outbox_items: int | None = None
    """How many memory items the outbox's item events hold (None: not counted yet)."""
    memory_items: int | None = None
    """How many memory items the session holds, once a patch stored it (None: not counted)."""
    patchable: bool = False
    """Whether the session holds exactly the stored head at its version, so that an append
    may be stored as a patch of it (see :mod:`tether.persistence.journal`)."""

    @property
    def tenant(self) -> str:
        return self.session.tenant

    @property
    def session_id(self) -> str:
        return self.session.session_id

    @property
    def version(self) -> str | None:
        return self.session.version

    def seal(self, store: SnapshotStore, chunk_items: int = CHUNK_ITEMS) -> None:
        """Write the session's older items as chunks once it holds more than two chunks' worth
        (before the head: a head never names a chunk that is not stored)."""
        items = self.session.memory_snapshot().items
        if len(items) <= 2 * chunk_items:
            return
        seal_count = (len(items) - chunk_items) // chunk_items * chunk_items
        base = 0
        if self.chunks:
            last = ChunkRef.parse(self.chunks[-1])
            base = last.first + last.size
        for start in range(0, seal_count, chunk_items):
            batch = items[start : start + chunk_items]
            self.chunks.append(store.write_chunk(self.tenant, self.session_id, base + start, batch))
        self.sealed = seal_count
        if len(self.chunks) >= 2 * INDEX_FANOUT:
            indexed: tuple[str, ...] = ()
            if self.index is not None:
                indexed = store.chunk_names(self.tenant, self.session_id, self.index)
            folded = [*indexed, *self.chunks[:-INDEX_FANOUT]]
            self.index = store.write_chunk_index(self.tenant, self.session_id, folded)
            self.chunks = self.chunks[-INDEX_FANOUT:]

    def fits_patch(
        self,
        memory_items: int,
        last_seq: int,
        added: int,
        *,
        archived: bool,
        batch: int = ARCHIVE_BATCH_EVENTS,
    ) -> bool:
        """Whether an append of ``added`` memory items, after which the session holds
        ``memory_items`` items and events up to ``last_seq``, can be stored as a patch of the
        head it started from: the full save would seal no chunk and, with an archive
        (``archived``, :attr:`outbox_items` counted), archive no outbox (``batch``: the
        threshold the full save would record)."""
        if memory_items > 2 * CHUNK_ITEMS:
            return False  # the full save seals a chunk
        if not archived:
            return True
        return (
            self.outbox_items is not None
            and last_seq - self.session.archived_seq < self.stored_batch
            # else a large append: the full save archives it at once
            and self.outbox_items + added <= batch
        )

    def count(self, *, archived: bool) -> None:
        """Count :attr:`memory_items` and (``archived``: there is an archive) :attr:`outbox_items`
        of a session loaded whole, for appends that patch it without counting them again."""
        session = self.session
        self.memory_items = len(session.memory_snapshot().items)
        if archived:
            self.outbox_items = outbox_items(session.events, session.archived_seq)

    def archive_batch_events(self, default: int) -> int:
        """The archiving threshold of this save: 1 (archive now) when the outbox holds more
        items than ``default`` (events of one item each never do), so a large ``add_items``
        does not ride in every later head until ``default`` events pile up. The head records
        it, so later readers re-derive whether this outbox was archived (see
        :mod:`tether.persistence.saving`)."""
        session = self.session
        outbox_items = sum(
            len(event.payload.items)
            for event in session.events
            if event.seq > session.archived_seq and isinstance(event.payload, ItemsAppendedPayload)
        )
        return 1 if outbox_items > default else default

    def snapshot(self) -> SessionSnapshot:
        head = self.session.snapshot()
        self.last_snapshot = head
        if not self.chunks and self.index is None:
            return head
        memory = head.memory
        if self.sealed:
            memory = MemorySnapshot.model_construct(
                items=memory.items[self.sealed :], summary=memory.summary
            )
        update = {
            "memory": memory,
            "memory_chunks": list(self.chunks),
            "memory_index": self.index,
            "schema_version": CHUNKED_SNAPSHOT_SCHEMA_VERSION,
        }
        self.last_snapshot = head.model_copy(update=update)
        return self.last_snapshot

    def saved_head(self, archive_batch_events: int | None) -> SessionSnapshot:
        """The head a successful save wrote, as :meth:`SnapshotStore.load_shallow` would return
        it: :meth:`snapshot`'s, with only the outbox when there is an archive (batch given; see
        :func:`tether.persistence.saving.put_head`). Owned by the caller."""
        head = self.last_snapshot
        assert head is not None, "saved_head() is for after a save"
        if archive_batch_events is None:
            return head
        outbox = [e for e in head.events if e.seq > head.archived_seq]
        return head.model_copy(
            update={"events": outbox, "archive_batch_events": max(1, archive_batch_events)}
        )

    def set_version(self, version: str | None) -> None:
        self.session.set_version(version)

    def mark_archived(self, seq: int) -> None:
        self.session.mark_archived(seq)

    def unreconciled_outbox(self) -> tuple[tuple[AgentEvent, ...], int] | None:
        return self.session.unreconciled_outbox()

    def mark_reconciled(self) -> None:
        self.session.mark_reconciled()


def outbox_items(events: Iterable[AgentEvent], archived_seq: int) -> int:
    """How many memory items the item events of an outbox (``events`` after ``archived_seq``)
    hold."""
    return sum(
        len(e.payload.items)
        for e in events
        if e.seq > archived_seq and isinstance(e.payload, ItemsAppendedPayload)
    )


class _Where(Protocol):
    tenant: str
    session_id: str


def newest_items(
    store: SnapshotStore,
    where: _Where,
    head_items: Iterable[Item],
    chunks: tuple[str, ...],
    index: str | None,
    limit: int | None,
) -> list[SdkItem]:
    """The last ``limit`` SDK items of the session ``where`` names (its tenant and id), whose
    head's own items are ``head_items`` (newest first), reading the chunks before them only as
    far as the limit needs."""
    tenant, session_id = where.tenant, where.session_id
    # newest first, converting only what the limit keeps (a memory item may stand for
    # several SDK items, so count SDK items, not memory items)
    newest: list[SdkItem] = []
    sources: list[Iterable[Item]] = [head_items]
    names = reversed(chunks)
    while sources:
        for item in sources.pop():
            if limit is not None and len(newest) >= limit:
                break
            newest.extend(reversed(from_memory(item)))
        if limit is not None and len(newest) >= limit:
            break
        name = next(names, None)
        if name is None and index is not None:  # past the head's own: the index's chunks
            names = reversed(store.chunk_names(tenant, session_id, index))
            index = None
            name = next(names, None)
        if name is not None:
            sources.append(reversed(store.read_chunk(tenant, session_id, name)))
    newest.reverse()
    return last_items(newest, limit)
