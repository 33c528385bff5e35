"""``TetherSession``: the OpenAI Agents SDK ``Session`` protocol over Tether's store and log.

>>> session = TetherSession.from_settings("support-42")           # doctest: +SKIP
>>> result = await Runner.run(agent, "hello", session=session)    # doctest: +SKIP

The conversation is a Tether session: its memory holds the SDK items (see
:mod:`~tether.integrations.openai_agents.items`), and each write is exactly one event in its
log (``MEMORY_ITEMS_APPENDED`` for ``add_items``, ``MEMORY_ITEMS_REMOVED`` for ``pop_item`` and
``clear_session``), so ``tether sessions verify``, ``history``, ``fork --at-seq`` and the
offline reader work on it like on any session.

The head keeps only the newest items; older ones are sealed into immutable chunks of 64 (a
head of schema version 2, see :mod:`~tether.integrations.openai_agents.chunked`), so an append
rewrites a head of bounded size, and ``get_items(limit)`` reads only the chunks holding the items
it returns. Every other reader (workers, ``tether sessions``, the offline reader) loads the
memory whole.

Every write loads the stored head, applies the change and saves it with compare-and-set, as
:meth:`tether.runtime.session.AgentSession.save` does; a writer that lost the race (another
thread or process saved first) reloads and applies its change again, so concurrent writers
never lose items. A writer starts from the head it wrote last instead of reading it back (the
compare-and-set still checks it). On a store that journals (the local one), an append that
neither seals a chunk nor fills the archive batch is stored as its event alone, one patch
record in the head's journal (see :mod:`tether.persistence.journal`), and reads are answered
from the head this object wrote or read last while the stored version is still that one.
There the append that seals a chunk archives the outbox (:data:`JOURNAL_ARCHIVE_BATCH_EVENTS`),
sheds it from the head and loads the head for the next patch: one append in 64 writes files.
Without a lease, a writer also finishes archiving the outbox it loaded when its predecessor may
not have yet, so archive segments never overlap.

Do not let a Tether worker run on the same session at the same time: a run's commit would then
conflict and be retried, not merged.

Storage calls block, so they run in a thread and never stall the event loop (see
:mod:`~tether.integrations.openai_agents.offload`). As with the SDK's own sessions, a write
whose caller is cancelled still finishes before the caller's ``CancelledError`` is raised.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

from pydantic_core import PydanticSerializationError

from tether.core.events import ItemsAppendedPayload
from tether.core.items import Item
from tether.errors import InvalidInput, ModelError, VersionConflict
from tether.ids import validate_id, validate_tenant
from tether.integrations.openai_agents.chunked import (
    JOURNAL_ARCHIVE_BATCH_EVENTS,
    ChunkedWrite,
    Pull,
    newest_items,
    outbox_items,
    unseal,
)
from tether.integrations.openai_agents.items import SdkItem, from_memory, to_memory
from tether.integrations.openai_agents.offload import call_in_thread
from tether.integrations.openai_agents.session_settings import as_session_settings
from tether.models.base import ModelRequest, ModelResponse
from tether.persistence.archives.base import EventArchive
from tether.persistence.codec import newest_head_items
from tether.persistence.saving import ARCHIVE_BATCH_EVENTS, save_session, should_archive
from tether.persistence.stores.base import JournalingStore, SnapshotStore, StoredSnapshot
from tether.persistence.writer_storage import open_writer_storage
from tether.runtime.agent import Agent
from tether.runtime.redaction import DEFAULT_REDACTOR, TextRedactor, settings_redactor
from tether.runtime.session import AgentSession
from tether.runtime.session_memory import last_items
from tether.settings import Settings, load_settings

T = TypeVar("T")

MAX_WRITE_ATTEMPTS = 32
"""Compare-and-set attempts of one write before it gives up (each loses only to a write that
succeeded, so reaching it means dozens of writers on one session at once)."""


class _Known(NamedTuple):
    """The memory of a stored head at ``version``: its own items, oldest first, and the chunks
    before them (see :class:`~tether.core.snapshot.SessionSnapshot`)."""

    version: str
    items: tuple[Item, ...]
    chunks: tuple[str, ...]
    chunk_index: str | None


class _NoModel:
    """The model of the storage-only agent behind a :class:`TetherSession`: never called."""

    def complete(self, request: ModelRequest) -> ModelResponse:
        raise ModelError(
            "a TetherSession only stores items; run agents with the SDK's Runner, or on "
            "workers with tether_agent()"
        )


class TetherSession:
    """A durable OpenAI Agents SDK session (``agents.memory.Session`` protocol).

    Args:
        session_id: the Tether session id (created on the first write).
        store: the snapshot store.
        archive: the event archive (None: events stay in the head).
        tenant: the tenant.
        redact: applied to every text of every item before it is stored, so reads give
            it redacted too (see :mod:`tether.runtime.redaction`): by default the credential
            patterns of :data:`~tether.runtime.redaction.SECRET_PATTERNS` (a pasted
            ``sk-...`` key is stored as ``***``), which always apply, then a function of your
            own if given; ``None`` stores every text as given.
        session_settings: the SDK's ``SessionSettings``, or a dict of its fields, converted
            as the SDK's own sessions do (its ``limit`` is the default of :meth:`get_items`).
    """

    def __init__(
        self,
        session_id: str,
        *,
        store: SnapshotStore,
        archive: EventArchive | None = None,
        tenant: str = "default",
        redact: TextRedactor | None = DEFAULT_REDACTOR,
        session_settings: Any = None,
    ) -> None:
        self.session_id = validate_id(session_id)
        self.tenant = validate_tenant(tenant)
        self.session_settings = as_session_settings(session_settings)
        self._agent = Agent(
            _NoModel(), "none", store=store, archive=archive, name="openai-agents", redact=redact
        )
        # the head this object saved last and its version: the next write starts from it
        # instead of reading and parsing it back (the compare-and-set still checks that it is
        # the stored one, and a conflict reloads from the store)
        self._kept: StoredSnapshot | None = None
        # or, after an append stored as a patch, the write itself (the session as stored)
        self._live: ChunkedWrite | None = None
        # the memory of the head this object wrote or read last, for reads while it is current
        self._known: _Known | None = None
        self._kept_lock = threading.Lock()
        journal: object = self._agent.store
        self._journal = (
            journal if isinstance(journal, JournalingStore) and journal.journals else None
        )
        self._batch = (
            ARCHIVE_BATCH_EVENTS if self._journal is None else JOURNAL_ARCHIVE_BATCH_EVENTS
        )

    @classmethod
    def from_settings(
        cls, session_id: str, settings: Settings | None = None, *, tenant: str | None = None
    ) -> TetherSession:
        """A session on the store named by the settings (``TETHER_STORE_URL`` and the S3
        settings; the environment when None), in ``tenant`` (default ``TETHER_TENANT``).

        Its writes drop the session's cached head (``TETHER_HEAD_CACHE_TTL_S``); a session
        built on a store of your own should get one from
        :func:`tether.persistence.writer_storage.open_writer_storage` for the same reason.
        Items are redacted as a worker redacts its events: the credential patterns, and the
        secrets the settings hold (the OpenAI key, the broker and Redis passwords)."""
        settings = settings or load_settings()
        # its writes drop the deployment's cached head, so a worker's next run of this session
        # reads what it wrote (not a cached older head it would redo after losing the CAS)
        store, archive = open_writer_storage(settings)
        return cls(
            session_id,
            store=store,
            archive=archive,
            tenant=tenant or settings.tenant,
            redact=settings_redactor(settings),
        )

    # --- the Session protocol ---------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[SdkItem]:
        """The last ``limit`` items, oldest first (all with None, unless the session settings
        give a limit)."""
        if limit is None:
            limit = self.session_settings.limit
        return await call_in_thread(self.read_items, limit)

    async def add_items(self, items: list[SdkItem]) -> None:
        """Append ``items`` (one event; nothing for an empty list)."""
        await call_in_thread(self.append_items, items, settle=True)

    async def pop_item(self) -> SdkItem | None:
        """Remove and return the newest item (one event); None when the session is empty."""
        return await call_in_thread(self.remove_last_item, settle=True)

    async def clear_session(self) -> None:
        """Remove every item (one event; nothing when already empty)."""
        await call_in_thread(self.clear_items, settle=True)

    # --- the same, blocking -----------------------------------------------------------------

    def read_items(self, limit: int | None = None) -> list[SdkItem]:
        """Blocking :meth:`get_items`. Reads the head and, newest first, only the chunks that
        hold the items it returns; when the stored head is still the one this object wrote or
        read last (its version, read without parsing, says so), not even the head."""
        if isinstance(limit, int) and not isinstance(limit, bool) and limit < 0:
            limit = None  # all items, as SQLiteSession gives them (SQLite's LIMIT -1)
        last_items(list[SdkItem](), limit)  # validates limit before any I/O
        store = self._store
        journal = self._journal
        known = None
        if journal is not None:  # elsewhere a version costs a read of the head: read it
            with self._kept_lock:
                known = self._known
        if journal is not None and (
            known is None or journal.head_version(self.tenant, self.session_id) != known.version
        ):
            loaded = journal.load_memory_version(self.tenant, self.session_id)
            if loaded is None:
                return []
            head, version = loaded
            where = f"{self.tenant}/{self.session_id}"
            items = tuple(reversed(list(newest_head_items(head, where=where))))
            known = _Known(version, items, tuple(head.memory_chunks), head.memory_index)
            with self._kept_lock:
                self._known = known
        if known is None:  # a store without journals: read the head every time
            memory = store.load_memory(self.tenant, self.session_id)
            if memory is None:
                return []
            where = f"{self.tenant}/{self.session_id}"
            return newest_items(
                store,
                self,
                newest_head_items(memory, where=where),
                tuple(memory.memory_chunks),
                memory.memory_index,
                limit,
            )
        return newest_items(
            store, self, reversed(known.items), known.chunks, known.chunk_index, limit
        )

    def append_items(self, items: list[SdkItem] | tuple[Mapping[str, Any], ...]) -> None:
        """Blocking :meth:`add_items`."""
        if not items:
            return
        converted = tuple(to_memory(item) for item in items)  # refuse bad items before writing
        try:
            if not self._append_live(converted):
                self._write(lambda session: session.add_items(converted), pull="none")
        except PydanticSerializationError as exc:
            # found as the write encodes (nothing was stored) rather than by a walk over every
            # text of every item before it, which every append would pay for
            raise InvalidInput(
                f"an item for {self.tenant}/{self.session_id} cannot be stored as JSON text "
                f"({exc}); a lone surrogate (a JSON \\ud800 without its pair) is the usual "
                "cause: send valid Unicode text. Nothing was stored"
            ) from None

    def _append_live(self, items: tuple[Item, ...]) -> bool:
        """Append ``items`` as a patch on the session this object stored last as one (see
        :meth:`_patch`), without :meth:`_write`'s rounds: the common case of ``add_items``,
        where they cost more than the rest. False (nothing written) when the append cannot be
        a patch of it; then :meth:`_write` reads the store and does the rest."""
        with self._kept_lock:
            write, known = self._live, self._known
            session = None if write is None else write.session
            if (
                write is None
                or session is None
                or write.memory_items is None
                or known is None
                or known.version != session.version
                or not write.fits_patch(
                    write.memory_items + len(items),
                    session.last_seq + 1,
                    len(items),
                    archived=self._agent.archive is not None,
                    batch=self._batch,
                )
            ):
                return False
            self._live = None  # used once: if this fails, the next write reads the store
        version = session.version
        assert self._journal is not None and version is not None  # as _patch left it
        event = session.add_items(items)
        assert event is not None and isinstance(event.payload, ItemsAppendedPayload)
        try:
            appended = self._journal.append_events(
                self.tenant,
                self.session_id,
                (event,),
                updated_at_ms=session.updated_at_ms,
                expected_version=version,
            )
        except VersionConflict:
            return False  # another writer saved first: _write starts from what it stored
        if appended is None:
            return False
        session.set_version(appended)
        stored = event.payload.items  # redacted, as the session holds them
        write.memory_items += len(stored)
        if write.outbox_items is not None:
            write.outbox_items += len(stored)
        known = _Known(appended, known.items + stored, known.chunks, known.chunk_index)
        with self._kept_lock:
            self._live, self._kept, self._known = write, None, known
        return True

    def remove_last_item(self) -> SdkItem | None:
        """Blocking :meth:`pop_item`. A Tether-native item that stands for several SDK items
        (a turn with several tool calls) is removed whole; its last SDK item is returned."""
        popped = self._write(lambda session: session.pop_item(), pull="last")
        if popped is None:
            return None
        forms = from_memory(popped)
        return forms[-1] if forms else None

    def clear_items(self) -> None:
        """Blocking :meth:`clear_session`."""
        self._write(lambda session: session.clear_items(), pull="all")

    # --- storage ----------------------------------------------------------------------------

    @property
    def _store(self) -> SnapshotStore:
        store = self._agent.store
        assert store is not None
        return store

    def _load(self, pull: Pull) -> ChunkedWrite | None:
        """The stored state to write on: the head's unsealed items (and the chunks ``pull``
        asks for) as the session's memory, the other chunks by name."""
        store = self._store
        with self._kept_lock:
            # used once: a retry reads the store
            live, self._live = self._live, None
            stored, self._kept = self._kept, None
        if live is not None and pull == "none":
            return live
        if stored is None:
            stored = store.load_shallow(self.tenant, self.session_id)
        if stored is None:
            return None
        head, chunks, index = unseal(store, stored, pull)
        outbox = list(head.events)  # a stored head carries only its outbox
        # announce=False: loading is not a write, so it leaves no event behind
        session = self._agent.session_from_snapshot(
            head, version=stored.version, copy=False, announce=False
        )
        archive = self._agent.archive
        write = ChunkedWrite(session, chunks, index, stored_batch=head.archive_batch_events)
        if archive is not None and outbox and should_archive(outbox, head.archive_batch_events):
            # The head's writer archives this outbox only after committing the head, so it may
            # not have yet. Writing the same segment is idempotent (same events, same bytes),
            # and it must exist before a head is committed on top of it: otherwise this
            # writer's own segment would start at the same seq and overlap it.
            archive.write_segment(self.tenant, self.session_id, outbox)
            session.mark_archived(outbox[-1].seq)
            session.mark_reconciled()
        else:
            write.patchable = pull == "none"
        return write

    def _write(self, change: Callable[[AgentSession], T], *, pull: Pull) -> T:
        """Apply ``change`` to the newest stored state and save it with compare-and-set; on a
        conflict start again from the state that won."""
        for attempt in range(MAX_WRITE_ATTEMPTS):
            with self._kept_lock:
                cached = self._kept is not None or (pull == "none" and self._live is not None)
            write = self._load(pull) or ChunkedWrite(
                self._agent.new_session(self.session_id, self.tenant)
            )
            session = write.session
            before = session.last_seq
            result = change(session)
            if session.last_seq == before:  # nothing to write (pop or clear on an empty session)
                if cached:
                    # judged on the head this object saved last, which another writer may have
                    # changed since: a no-op writes nothing for the compare-and-set to refuse,
                    # so judge again on the stored head (_load used the cache up)
                    continue
                return result
            try:
                if self._patch(write, before):
                    return result
                chunks_before = len(write.chunks), write.index
                write.seal(self._store)
                batch = write.archive_batch_events(self._batch)
                if self._journal is not None and (len(write.chunks), write.index) != chunks_before:
                    batch = 1  # archive with the seal: see JOURNAL_ARCHIVE_BATCH_EVENTS
                version = save_session(
                    write, self._store, self._agent.archive, archive_batch_events=batch
                )
                archived = batch if self._agent.archive is not None else None
                if archived == 1 or (  # on a journal, shed it now: the next append patches
                    archived is not None
                    and self._journal is not None
                    and session.archived_seq == session.last_seq
                ):
                    rewritten = self._drop_archived_outbox(write)
                    if rewritten is None:
                        return result  # saved; another writer saved on top of it since
                    archived, version = self._batch, rewritten
                self._keep(write, version, archived)
                self._prime()
                return result
            except VersionConflict:
                # another writer won this round; back off a little so we do not collide again
                time.sleep(random.uniform(0, 0.002 * (attempt + 1)))
        raise VersionConflict(
            f"{self.tenant}/{self.session_id}: {MAX_WRITE_ATTEMPTS} writers in a row saved "
            "before this one; nothing of this write was saved. Retry it, or give each "
            "conversation its own session"
        )

    def _keep(self, write: ChunkedWrite, version: str, archived: int | None) -> None:
        """Keep the head ``write`` just saved as ``version``: the next write starts from it,
        and reads are answered from its memory while the stored version is still that one."""
        saved = write.saved_head(archived)
        known = _Known(version, saved.memory.items, tuple(saved.memory_chunks), saved.memory_index)
        with self._kept_lock:
            self._kept, self._live, self._known = StoredSnapshot(saved, version), None, known

    def _prime(self) -> None:
        """On a journal, load the head just kept for the next append's patch (the shortcut of
        :meth:`_append_live`), in this call, which wrote files already, rather than in that one.
        Nothing is read; a head that cannot be patched is left for the next write to load."""
        if self._journal is None:
            return
        write = self._load("none")  # the kept head (after a race, the stored one)
        if write is not None and write.patchable:
            write.count(archived=self._agent.archive is not None)
            with self._kept_lock:
                self._live = write

    def _drop_archived_outbox(self, write: ChunkedWrite) -> str | None:
        """Write the head ``write`` just saved again without the large outbox it carried and
        has archived since: else every reader would read it whole (``get_items(limit=20)``
        compares versions by the head's bytes) until the next write. Returns the new version;
        None when another writer saved first (the head saved before stands; nothing is kept
        here, so the next call reads the store)."""
        try:
            return save_session(
                write, self._store, self._agent.archive, archive_batch_events=self._batch
            )
        except VersionConflict:
            with self._kept_lock:
                self._kept = self._live = self._known = None
            return None

    def _patch(self, write: ChunkedWrite, before: int) -> bool:
        """Store ``write``'s append (its events after ``before``) as a patch of the stored head
        when it can be one: an append to the head it loaded that neither seals a chunk nor
        fills the archive batch, on a store that journals. True: stored (and ``write`` kept
        live for the next append); False: nothing written, save the whole head.

        Raises:
            VersionConflict: another writer saved first; nothing was written.
        """
        journal = self._journal
        session = write.session
        version = session.version
        if journal is None or not write.patchable or version is None:
            return False
        memory = session.memory_snapshot()
        events = session.events
        new = events[before - session.last_seq :]
        added = sum(
            len(e.payload.items) for e in new if isinstance(e.payload, ItemsAppendedPayload)
        )
        archived = self._agent.archive is not None
        if archived and write.outbox_items is None:
            # the loaded outbox is gapless and held no event that archives at once (else
            # _load archived it and this write is not patchable), and appends add none: its
            # length alone decides
            write.outbox_items = outbox_items(
                events[: len(events) - len(new)], session.archived_seq
            )
        if not write.fits_patch(
            len(memory.items), session.last_seq, added, archived=archived, batch=self._batch
        ):
            return False
        appended = journal.append_events(
            self.tenant,
            self.session_id,
            new,
            updated_at_ms=session.updated_at_ms,
            expected_version=version,
        )
        if appended is None:
            return False
        session.set_version(appended)
        if write.outbox_items is not None:
            write.outbox_items += added
        write.memory_items = len(memory.items)
        known = _Known(appended, memory.items, tuple(write.chunks), write.index)
        with self._kept_lock:
            self._live, self._kept, self._known = write, None, known
        return True
