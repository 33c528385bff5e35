"""Saving sessions to a snapshot store, with the event log either embedded or archived.

Without an archive the head embeds the whole log (simple, fine for small in-process use). With an
archive, the head carries only the *outbox*: committed events not yet known to be archived. The
head is written first (compare-and-set), then the outbox is archived as one immutable segment, so
a segment is only ever written for committed events and a crash between the two steps is repaired
by the next save (the outbox is still in the head).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.archive import EventArchive
from shared.events import AgentEvent
from shared.store import SnapshotStore

if TYPE_CHECKING:
    from shared.session import AgentSession


def save_session(session: AgentSession, store: SnapshotStore, archive: EventArchive | None) -> str:
    """Save ``session`` with compare-and-set against its known version; return the new version."""
    snapshot = session.snapshot()
    if archive is None:
        version = store.save(snapshot, session.version)
        session.set_version(version)
        return version
    outbox = [e for e in snapshot.events if e.seq > snapshot.archived_seq]
    head = snapshot.model_copy(update={"events": outbox})
    version = store.save(head, session.version)
    session.set_version(version)
    archive_outbox(session, archive, outbox)
    return version


def archive_outbox(session: AgentSession, archive: EventArchive, outbox: list[AgentEvent]) -> None:
    """Archive the committed outbox, skipping what an earlier, interrupted save already wrote."""
    if not outbox:
        return
    if not session.archive_trusted:
        # a head loaded from storage may describe an outbox whose segment was written just
        # before a crash: ask the archive instead of risking an overlapping segment
        session.mark_archived(archive.last_seq(session.tenant, session.session_id))
    pending = [e for e in outbox if e.seq > session.archived_seq]
    if pending:
        archive.write_segment(session.tenant, session.session_id, pending)
        session.mark_archived(pending[-1].seq)
    session.archive_trusted = True
