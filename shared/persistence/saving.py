"""Saving sessions to a snapshot store, with the event log either embedded or archived.

Without an archive the head embeds the whole log (simple, fine for small in-process use).

With an archive the head carries only the *outbox*: committed events not yet archived. The head
is written first (compare-and-set: the commit point), and only when the outbox holds at least
``archive_batch_events`` events (or an event that copies the whole memory) is it written to the
archive, as one immutable segment named by
its sequence range. Archiving in batches saves object-store requests on most runs, while the
head stays bounded (the outbox never exceeds one batch plus one run).

Segments are always exactly the outbox of a committed head, so they never overlap: a session
restored from a head whose outbox reached its writer's threshold cannot know whether the writer
archived it before stopping, so it asks (a Redis hint when there is one, else the archive's
listing) before its own first segment, and writes that outbox's segment itself when it is not
there yet (its writer may still write it, late: the same bytes); below the threshold the writer
certainly did not archive, and no request is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tether.core.events import AgentEvent, CompactPayload, RestoredPayload
from tether.core.snapshot import SessionSnapshot
from tether.persistence.archives.base import EventArchive
from tether.persistence.stores.base import SnapshotStore

ARCHIVE_BATCH_EVENTS = 32
"""Default archiving threshold, in events (a few runs of a small agent)."""


class ArchiveHint(Protocol):
    """A fast, possibly lossy record of how far a session is archived (e.g. a Redis key).

    Only an optimisation: a missing or stale hint costs one identical segment rewrite.
    """

    def archived_through(self, tenant: str, session_id: str) -> int:
        """The highest sequence number known archived (0 when unknown)."""

    def record(self, tenant: str, session_id: str, seq: int) -> None:
        """Remember that events up to ``seq`` are archived."""


class Saveable(Protocol):
    """What saving needs of a session: its identity, its state, and its save bookkeeping.

    :class:`~tether.runtime.session.AgentSession` is one; persistence never imports the runtime,
    so the runtime can save itself through this module without an import cycle.
    """

    @property
    def tenant(self) -> str:
        """The session's tenant."""

    @property
    def session_id(self) -> str:
        """The session's id."""

    @property
    def version(self) -> str | None:
        """The store version this object last loaded or saved (None: never stored)."""

    def snapshot(self) -> SessionSnapshot:
        """The head to write (a deep copy)."""

    def set_version(self, version: str | None) -> None:
        """Record the version a save returned."""

    def mark_archived(self, seq: int) -> None:
        """Record that events up to ``seq`` are in the archive."""

    def unreconciled_outbox(self) -> tuple[tuple[AgentEvent, ...], int] | None:
        """The outbox and archive batch of the loaded head, until reconciled (None: done)."""

    def mark_reconciled(self) -> None:
        """Record that the archive's reach is known."""


def save_session(
    session: Saveable,
    store: SnapshotStore,
    archive: EventArchive | None,
    *,
    archive_batch_events: int = ARCHIVE_BATCH_EVENTS,
    hint: ArchiveHint | None = None,
) -> str:
    """Save ``session`` with compare-and-set against its known version; return the new version.

    Raises:
        VersionConflict: someone else saved the session since this object loaded or saved it.
    """
    outbox = put_head(session, store, archive, archive_batch_events=archive_batch_events, hint=hint)
    if outbox:
        assert archive is not None
        archive_outbox(session, archive, outbox)
        if hint is not None:
            hint.record(session.tenant, session.session_id, outbox[-1].seq)
    assert session.version is not None
    return session.version


def put_head(
    session: Saveable,
    store: SnapshotStore,
    archive: EventArchive | None,
    *,
    archive_batch_events: int = ARCHIVE_BATCH_EVENTS,
    hint: ArchiveHint | None = None,
    writer_fence: int = 0,
) -> list[AgentEvent]:
    """Write the head (compare-and-set: the commit point); return the outbox to archive now
    (empty when the batch is not full yet, or without an archive). ``writer_fence`` is the
    lease fence of the writer, recorded in the head.

    Raises:
        VersionConflict: someone else saved the session since this object loaded or saved it.
    """
    if archive is None:
        head = session.snapshot().model_copy(update={"writer_fence": writer_fence})
        session.set_version(store.save(head, session.version))
        return []
    batch = max(1, archive_batch_events)
    reconcile_loaded_outbox(session, archive, hint)
    snapshot = session.snapshot()
    outbox = [e for e in snapshot.events if e.seq > snapshot.archived_seq]
    head = snapshot.model_copy(
        update={"events": outbox, "archive_batch_events": batch, "writer_fence": writer_fence}
    )
    session.set_version(store.save(head, session.version))
    return outbox if should_archive(outbox, batch) else []


def archive_outbox(session: Saveable, archive: EventArchive, outbox: Sequence[AgentEvent]) -> None:
    """Write a committed head's outbox as one immutable segment."""
    archive.write_segment(session.tenant, session.session_id, outbox)
    session.mark_archived(outbox[-1].seq)


def should_archive(outbox: Sequence[AgentEvent], batch: int) -> bool:
    """The archiving rule, a function of the outbox alone (a later reader re-derives it).

    Archive once the outbox holds ``batch`` events, or as soon as it holds an event that copies
    the whole memory (a compaction or a full restore), so heads stay small.
    """
    if len(outbox) >= batch:
        return True
    return any(
        isinstance(e.payload, CompactPayload)
        or (isinstance(e.payload, RestoredPayload) and e.payload.memory is not None)
        for e in outbox
    )


def reconcile_loaded_outbox(
    session: Saveable, archive: EventArchive, hint: ArchiveHint | None = None
) -> None:
    """Learn how far the archive really goes before this session writes a segment.

    A head's outbox is archived by its writer exactly when :func:`should_archive` said so; then
    the writer may or may not have finished before stopping. Only in that case the archive is
    asked (the hint first, else a listing), so the next segment starts right after the last one.
    """
    unreconciled = session.unreconciled_outbox()
    if unreconciled is None:
        return
    loaded, loaded_batch = unreconciled
    if loaded and loaded_batch and should_archive(loaded, loaded_batch):
        first, last = loaded[0].seq, loaded[-1].seq
        known = hint.archived_through(session.tenant, session.session_id) if hint else 0
        if known < last:
            known = archive.last_seq(session.tenant, session.session_id)
        if known < first:
            # Not there yet, but its writer may still write it: a worker archives after it
            # finished the run and let the session go, so on a busy machine the next holder
            # can get here first (and a frozen worker may wake up later). Write that very
            # segment now, byte for byte what its writer writes: whatever it does, no two
            # segments overlap (a longer one from ``first`` would, and reads refuse overlaps).
            archive.write_segment(session.tenant, session.session_id, loaded)
            if hint is not None:
                hint.record(session.tenant, session.session_id, last)
            known = last
        session.mark_archived(min(known, last))
    session.mark_reconciled()
