"""The offline reader: list, read, events, search, project, verify, history and fork stored
sessions.

Works over any snapshot store, with an optional event archive (then the full history is the
archive plus the head's outbox) and an optional live stream (for events of runs in flight).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pydantic import JsonValue

from tether.core.context import CompactResult
from tether.core.events import AgentEvent, EventType, ForkedPayload, now_ms
from tether.core.fold import project_events
from tether.core.history import HistoryPoint, history_points, memory_at
from tether.core.memory import MemorySnapshot
from tether.core.snapshot import SessionSnapshot
from tether.errors import SessionExists, SessionNotFound
from tether.ids import validate_id, validate_tenant
from tether.persistence.archives.base import EventArchive
from tether.persistence.stores.base import SnapshotStore, iter_session_ids
from tether.persistence.streams.base import EventStream


@dataclass(frozen=True)
class VerifyReport:
    """Result of :meth:`SessionLogReader.verify`."""

    tenant: str
    session_id: str
    ok: bool
    event_count: int
    last_seq: int
    problems: tuple[str, ...] = ()


class SessionLogReader:
    """Read-side facade over stored sessions. Keeps no state of its own.

    Args:
        store: the snapshot store.
        archive: the event archive, when events are archived rather than embedded.
        stream: the live stream, for :meth:`events` with ``include_live=True``.
    """

    def __init__(
        self,
        store: SnapshotStore,
        archive: EventArchive | None = None,
        stream: EventStream | None = None,
    ) -> None:
        self.store = store
        self.archive = archive
        self.stream = stream

    def list_session_ids(self, tenant: str = "default") -> list[str]:
        """Every session id of ``tenant``, ascending."""
        return iter_session_ids(self.store, validate_tenant(tenant))

    def read(self, session_id: str, *, tenant: str = "default") -> SessionSnapshot | None:
        """The stored head with its whole history, or None when the session does not exist.

        ``events`` is every committed event (the archive's segments plus the head's outbox), not
        only the outbox the stored head carries; everything else is the head as stored.
        """
        head = self._head(session_id, tenant)
        if head is None:
            return None
        return head.model_copy(update={"events": self._history(head)})

    def _head(self, session_id: str, tenant: str) -> SessionSnapshot | None:
        stored = self.store.load(validate_tenant(tenant), validate_id(session_id))
        return stored.snapshot if stored else None

    def _require(self, session_id: str, tenant: str) -> SessionSnapshot:
        head = self._head(session_id, tenant)
        if head is None:
            raise SessionNotFound(
                f"session {tenant}/{session_id} not found; list sessions with "
                f"'tether sessions list --tenant {tenant}'"
            )
        return head

    def events(
        self, session_id: str, *, tenant: str = "default", include_live: bool = False
    ) -> list[AgentEvent]:
        """The committed history in sequence order (plus in-flight events when asked)."""
        head = self._require(session_id, tenant)
        return self._history(head, include_live=include_live)

    def _history(self, head: SessionSnapshot, *, include_live: bool = False) -> list[AgentEvent]:
        if self.archive is None:
            events = list(head.events)
        else:
            # the archive is read after the head: a writer may have committed (and archived)
            # newer events since, which belong to a newer head than this one; the history of
            # this head stops at its last_seq (verify failed a healthy session, and a fork
            # mixed this head's memory with them)
            events = [
                e for e in self.archive.read(head.tenant, head.session_id) if e.seq <= head.last_seq
            ]
            last = events[-1].seq if events else 0
            events.extend(e for e in head.events if e.seq > last)
        if include_live and self.stream is not None:
            last = events[-1].seq if events else 0
            events.extend(self.stream.read(head.tenant, head.session_id, after_seq=last))
        return events

    def search(
        self,
        session_id: str,
        *,
        tenant: str = "default",
        types: Iterable[EventType] | None = None,
        predicate: Callable[[AgentEvent], bool] | None = None,
    ) -> list[AgentEvent]:
        """Events whose type is in ``types`` and/or that pass ``predicate``.

        With neither, nothing matches (as in the reference).
        """
        wanted = set(types) if types is not None else None
        if wanted is None and predicate is None:
            return []
        return [
            e
            for e in self.events(session_id, tenant=tenant)
            if (wanted is None or e.type in wanted) and (predicate is None or predicate(e))
        ]

    def project(self, session_id: str, *, tenant: str = "default") -> MemorySnapshot:
        """Fold the committed history into the memory it describes."""
        return project_events(self.events(session_id, tenant=tenant))

    def verify(self, session_id: str, *, tenant: str = "default") -> VerifyReport:
        """Check the event contract on stored data: gapless sequence, fold equals stored memory."""
        head = self._require(session_id, tenant)
        events = self._history(head)
        problems: list[str] = []
        for expected, event in enumerate(events, start=1):
            if event.seq != expected:
                problems.append(
                    f"sequence gap or duplicate: expected seq {expected}, found {event.seq}"
                )
                break
        last = events[-1].seq if events else 0
        if last != head.last_seq:
            problems.append(
                f"history ends at seq {last} but the head says last_seq={head.last_seq}"
            )
        if project_events(events) != head.memory:
            problems.append("folding the history does not give the stored memory")
        return VerifyReport(
            tenant=head.tenant,
            session_id=head.session_id,
            ok=not problems,
            event_count=len(events),
            last_seq=last,
            problems=tuple(problems),
        )

    def history(self, session_id: str, *, tenant: str = "default") -> list[HistoryPoint]:
        """The points the session can be forked from (see :mod:`tether.core.history`): each
        user input, each run's end, each memory write outside a run, in sequence order."""
        return history_points(self.events(session_id, tenant=tenant))

    def fork(
        self,
        session_id: str,
        new_session_id: str,
        *,
        tenant: str = "default",
        at_seq: int | None = None,
        attributes: Mapping[str, JsonValue] | None = None,
    ) -> SessionSnapshot:
        """Copy a session under a new id, as it is or as it was at ``at_seq``; the source is
        untouched.

        The fork's history is the source's events up to ``at_seq`` (all of them by default),
        renamed to the new id, followed by one ``SESSION_FORKED`` event naming the source and
        ``at_seq``; its memory is their fold. It keeps the metadata attributes, gets a fresh
        ``updated_at_ms`` and ``parent_session_id`` set to the source, and no applied-request
        records (its runs are its own). ``attributes`` are added to the fork's metadata
        attributes (a rerun marks its fork so, see :mod:`tether.runs.rerun`).

        Raises:
            SessionNotFound: the source does not exist.
            SessionExists: ``new_session_id`` already exists (never overwritten).
            InvalidInput: ``at_seq`` is past the end of the history or before its first
                replayable point (``history`` lists the points one can fork from).
        """
        head = self._require(session_id, tenant)
        validate_id(new_session_id)
        if self.store.load(tenant, new_session_id) is not None:
            raise SessionExists(
                f"cannot fork {tenant}/{session_id} to {new_session_id!r}: that session exists; "
                "choose another id or delete it first"
            )
        history = self._history(head)
        if at_seq is None or at_seq == head.last_seq:
            at, kept, memory, last_compact = head.last_seq, history, head.memory, head.last_compact
        else:
            at = at_seq
            kept, memory, last_compact = memory_at(history, at, where=f"{tenant}/{session_id}")
        fork = _fork_head(head, new_session_id, at, kept, memory, last_compact)
        if attributes:
            fork.metadata.attributes.update(attributes)
        self.store.save(fork, None)
        if self.archive is not None:
            # the head keeps the history as its outbox until the fork's next save trims it
            self.archive.write_segment(tenant, new_session_id, fork.events)
        return fork


def _fork_head(
    head: SessionSnapshot,
    new_session_id: str,
    at: int,
    kept: list[AgentEvent],
    memory: MemorySnapshot,
    last_compact: CompactResult | None,
) -> SessionSnapshot:
    """The head of a fork of ``head`` at ``at``: ``kept`` renamed, then ``SESSION_FORKED``."""
    origin = AgentEvent(
        type=EventType.SESSION_FORKED,
        tenant=head.tenant,
        session_id=new_session_id,
        seq=at + 1,
        payload=ForkedPayload(
            source_tenant=head.tenant,
            source_session_id=head.session_id,
            at_seq=at,
            source_last_seq=head.last_seq,
        ),
    )
    events = [e.model_copy(update={"session_id": new_session_id}) for e in kept] + [origin]
    metadata = head.metadata.model_copy(
        deep=True,
        update={
            "session_id": new_session_id,
            "parent_session_id": head.session_id,
            "updated_at_ms": max(now_ms(), head.metadata.updated_at_ms),
        },
    )
    # a new head, not a copy of the source's: nothing of its bookkeeping (applied requests,
    # archive extent, writer) belongs to the fork. archive_batch_events=1: this outbox *is*
    # archived, and a later writer must know it (see tether.persistence.saving)
    return SessionSnapshot(
        metadata=metadata,
        memory=memory,
        events=events,
        last_seq=origin.seq,
        archive_batch_events=1,
        last_compact=last_compact,
    )
