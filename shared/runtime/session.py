"""Agent sessions: a stable id, metadata, memory, an event log, snapshot and restore.

Every memory write goes through :meth:`AgentSession._write`, which applies the event to memory
with :func:`tether.core.fold.apply_event` and appends it to the log, so folding the log always
gives the
memory (the event contract).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import JsonValue

from tether.core.context import CompactResult
from tether.core.events import (
    AgentEvent,
    CompactPayload,
    EmptyPayload,
    ErrorPayload,
    EventType,
    Payload,
    RestoredPayload,
    now_ms,
)
from tether.core.fold import apply_event
from tether.core.memory import Memory, MemorySnapshot
from tether.core.results import Resolution
from tether.core.snapshot import RunRecord, SessionMetadata, SessionSnapshot
from tether.core.text import valid_text
from tether.errors import StoreNotConfigured, TetherError
from tether.ids import new_id, validate_id, validate_tenant
from tether.persistence.codec import sha256_hex
from tether.runtime.redaction import redact_event
from tether.runtime.session_memory import SessionMemoryOps

if TYPE_CHECKING:
    from tether.core.results import AgentResult
    from tether.runtime.base import AgentSpec, SessionRunner
    from tether.runtime.progress import RunProgress
    from tether.runtime.streaming import RunDeltas

log = logging.getLogger(__name__)

Listener = Callable[[AgentEvent], None]
EMPTY_PAYLOAD = EmptyPayload()  # frozen: one value serves every event without a payload
CancelCheck = Callable[[], bool]


def memory_checksum(memory: MemorySnapshot) -> str:
    """A stable digest of a memory value (used by by-reference restores)."""
    return sha256_hex(memory.model_dump_json().encode())


class AgentSession(SessionMemoryOps):
    """One conversation with an agent.

    Memory verbs outside runs (``get_items``, ``add_items``, ``pop_item``, ``clear_items``,
    ``replace_tool_output``, ``compact``) come from
    :class:`~tether.runtime.session_memory.SessionMemoryOps`.

    Build sessions with :meth:`Agent.new_session` or :meth:`Agent.resume_session`; do not call the
    constructor directly (the agent hands each session the runner of its runs: the loop and the
    approvals, which sit above this module).
    """

    def __init__(
        self,
        agent: AgentSpec,
        memory: Memory,
        metadata: SessionMetadata,
        *,
        runner: SessionRunner[AgentSession],
        listeners: Sequence[Listener] = (),
    ) -> None:
        validate_id(metadata.session_id)
        validate_tenant(metadata.tenant)
        self._agent = agent
        self._runner = runner
        self._memory = memory
        self._metadata = metadata
        self._listeners: list[Listener] = list(listeners)
        self._events: list[AgentEvent] = []
        self._last_seq = 0
        self._archived_seq = 0
        self._last_compact: CompactResult | None = None
        self._applied: list[RunRecord] = []
        self._version: str | None = None
        # False while the outbox loaded from a head may or may not be archived yet
        self._archive_trusted = True
        self._loaded_outbox: tuple[AgentEvent, ...] = ()
        self._loaded_archive_batch = 0
        self._lock = threading.RLock()

    # --- identity and metadata -------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """The stable session id."""
        return self._metadata.session_id

    @property
    def tenant(self) -> str:
        """The tenant this session belongs to."""
        return self._metadata.tenant

    @property
    def agent(self) -> AgentSpec:
        """The agent running this session."""
        return self._agent

    @property
    def metadata(self) -> SessionMetadata:
        """A copy of the metadata (mutating it changes nothing)."""
        return self._metadata.model_copy(deep=True)

    def put_metadata(self, key: str, value: JsonValue) -> None:
        """Set a metadata attribute and touch ``updated_at_ms``; the agent's redaction applies
        to its key and every text in its value first (metadata is stored in the head)."""
        redact = self._agent.redact
        if redact is not None:
            from tether.runtime.redaction import redact_tree

            key, value = redact(key), redact_tree(value, redact)
        with self._lock:
            self._metadata.attributes[key] = value
            self.touch()

    def metadata_attribute(self, key: str) -> JsonValue:  # one, without copying the rest
        return self._metadata.attributes.get(key)

    def put_runtime_metadata(self, key: str, value: JsonValue) -> None:
        """Set an attribute the runtime keeps (ids, not redacted): one dict write, no lock, so
        safe from a tool's thread while the loop holds the session."""
        self._metadata.attributes[key] = value

    @property
    def updated_at_ms(self) -> int:
        """When the session last changed (the metadata's, without copying it)."""
        return self._metadata.updated_at_ms

    def touch(self) -> None:
        """Set ``updated_at_ms`` to now."""
        self._metadata.updated_at_ms = max(now_ms(), self._metadata.updated_at_ms)

    @property
    def version(self) -> str | None:
        """The store version this session was loaded from or last saved as (None: never stored)."""
        return self._version

    @property
    def last_seq(self) -> int:
        """Sequence number of the newest event."""
        return self._last_seq

    @property
    def last_compact(self) -> CompactResult | None:
        """The result of the most recent compaction, if any."""
        return self._last_compact

    @property
    def applied(self) -> list[RunRecord]:
        """Records of recently applied requests (distributed runs use them for idempotency)."""
        return list(self._applied)

    # --- events ------------------------------------------------------------------------------

    @property
    def events(self) -> list[AgentEvent]:
        """A copy of the event log held by this session object."""
        with self._lock:
            return list(self._events)

    def events_after(self, seq: int) -> list[AgentEvent] | None:
        """The held events after ``seq``, oldest first, read from the end (cheap for a few);
        None when the log held here no longer reaches back to ``seq``."""
        with self._lock:
            newer: list[AgentEvent] = []
            for event in reversed(self._events):
                if event.seq <= seq:
                    return newer[::-1]
                newer.append(event)
            return None

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """The listeners called with every event."""
        return tuple(self._listeners)

    def find_applied(self, request_id: str) -> RunRecord | None:
        """The record of ``request_id`` if this session already applied it."""
        for record in reversed(self._applied):
            if record.request_id == request_id:
                return record
        return None

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` with every future event (exceptions in it are logged, never raised)."""
        self._listeners.append(listener)

    def memory_snapshot(self) -> MemorySnapshot:
        """The current memory value."""
        return self._memory.snapshot()

    def emit(
        self,
        type_: EventType,
        payload: Payload | None = None,
        *,
        run_id: str | None = None,
        step: int = 0,
    ) -> AgentEvent:
        """Append an event that does not write memory and notify listeners."""
        return self._append(type_, payload, run_id=run_id, step=step, write=False)

    def write(
        self,
        type_: EventType,
        payload: Payload,
        *,
        run_id: str | None = None,
        step: int = 0,
        touch: bool = True,
    ) -> AgentEvent:
        """Apply a memory-writing event to memory and append it: exactly one event per write.

        The only way memory changes (the agent loop writes through it too), which is what makes
        folding the event log reproduce memory.
        """
        return self._append(type_, payload, run_id=run_id, step=step, write=True, touch=touch)

    def _append(
        self,
        type_: EventType,
        payload: Payload | None,
        *,
        run_id: str | None,
        step: int,
        write: bool,
        touch: bool = True,
    ) -> AgentEvent:
        with self._lock:
            metadata = self._metadata
            event = AgentEvent.appended(
                type_,
                EMPTY_PAYLOAD if payload is None else payload,
                tenant=metadata.tenant,
                session_id=metadata.session_id,
                seq=self._last_seq + 1,
                run_id=run_id,
                step=step,
            )
            redact = self._agent.redact
            if redact is not None:  # before memory, listeners and storage see it
                event = redact_event(event, redact)
            if write:
                apply_event(self._memory, event)
            self._events.append(event)
            self._last_seq = event.seq
            if touch:
                self.touch()
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a listener must never break a run
                log.exception("event listener %r failed on %s; ignored", listener, event.type)
        return event

    def emit_error(self, exc: BaseException, *, run_id: str | None, step: int = 0) -> AgentEvent:
        """Record a run-ending failure as an ``ERROR`` event."""
        retryable = isinstance(exc, TetherError) and exc.retryable
        message = valid_text(str(exc))  # it may quote a model's or a tool's text
        return self.emit(
            EventType.ERROR,
            ErrorPayload(error_type=type(exc).__name__, message=message, retryable=retryable),
            run_id=run_id,
            step=step,
        )

    # --- running -----------------------------------------------------------------------------

    def run(
        self,
        input: str | None,
        *,
        run_id: str | None = None,
        cancel_check: CancelCheck | None = None,
        timeout_s: float | None = None,
        checkpoint: Callable[[], None] | None = None,
        resume: RunProgress | None = None,
        on_delta: RunDeltas | None = None,
        request_id: str | None = None,
    ) -> AgentResult:
        """Run the agent loop on ``input`` (None continues from memory, e.g. after a patch).

        Args:
            input: the user input, or None to continue from memory.
            run_id: the run id recorded on every event (default: a new one).
            cancel_check: polled between steps; when it returns True the run stops.
            timeout_s: wall-clock limit of this run (default: the agent's ``timeout_s``).
            checkpoint: called at every point the run could be resumed from (see
                :mod:`tether.runtime.loop`).
            resume: go on with ``run_id`` from this progress, which :meth:`replay` put in
                this session, instead of starting it (``input`` is then ignored).
            on_delta: takes the pieces of each model answer as they arrive, when the model
                streams (:mod:`tether.runtime.streaming`); None: the model's ``complete``.
            request_id: the request this run applies: its tools' idempotency keys derive from
                it (default: from the run id).

        Raises:
            AgentError: the model failed, the run timed out or was cancelled (after an ``ERROR``
                event is logged).
        """
        with self._lock:
            return self._runner.run(
                self,
                input,
                run_id=run_id or new_id("run"),
                cancel_check=cancel_check,
                timeout_s=timeout_s,
                checkpoint=checkpoint,
                resume=resume,
                on_delta=on_delta,
                request_id=request_id,
            )

    def resolve(
        self,
        resolutions: Sequence[Resolution],
        *,
        run_id: str | None = None,
        request_id: str | None = None,
    ) -> None:
        """Settle pending calls of a ``WAITING`` run (see :mod:`tether.runtime.approvals`);
        then :meth:`run` with input None goes on.

        Raises:
            InvalidInput: a call id is not pending (unknown, or already settled); nothing of
                the later resolutions is applied.
        """
        with self._lock:
            run_id = run_id or new_id("run")
            self._runner.resolve(self, resolutions, run_id=run_id, request_id=request_id)

    # --- snapshot, restore, save -------------------------------------------------------------

    def snapshot(self) -> SessionSnapshot:
        """A deep, defensive copy of everything needed to restore this session."""
        with self._lock:
            return SessionSnapshot(
                metadata=self._metadata.model_copy(deep=True),
                memory=self._memory.snapshot(),
                events=list(self._events),
                last_seq=self._last_seq,
                archived_seq=self._archived_seq,
                # while unreconciled, pass on what the loaded head said about its archiving, so
                # a session restored from this snapshot asks the archive too
                archive_batch_events=0 if self._archive_trusted else self._loaded_archive_batch,
                last_compact=self._last_compact,
                applied=list(self._applied),
            )

    def restore(
        self,
        snapshot: SessionSnapshot,
        *,
        by_reference: bool = False,
        copy: bool = True,
        announce: bool = True,
    ) -> AgentEvent | None:
        """Install ``snapshot`` and emit ``SESSION_RESTORED``.

        Args:
            snapshot: the state to install (its events become this session's log).
            by_reference: the snapshot is the committed head of this same log, so the event only
                names its sequence and memory checksum instead of copying the whole memory
                (keeps per-run history O(new events)). The fold leaves memory unchanged.
            copy: take a defensive deep copy (False when the caller gives up the snapshot).
            announce: emit ``SESSION_RESTORED`` (False: the caller replays events
                that already hold one, to resume a run).
        """
        with self._lock:
            # copy=False: the caller hands over a snapshot it just parsed and will not touch
            snap = snapshot.copy_deep() if copy else snapshot
            self._metadata = snap.metadata
            self._events = list(snap.events)
            self._last_seq = snap.last_seq
            self._archived_seq = snap.archived_seq
            self._last_compact = snap.last_compact
            self._applied = list(snap.applied)
            self._archive_trusted = False
            self._loaded_outbox = tuple(e for e in snap.events if e.seq > snap.archived_seq)
            self._loaded_archive_batch = snap.archive_batch_events
            self._memory.reset(snap.memory)
            if not announce:
                return None
            if by_reference:
                payload = RestoredPayload(
                    memory=None, base_seq=snap.last_seq, checksum=memory_checksum(snap.memory)
                )
            else:
                payload = RestoredPayload(memory=snap.memory, base_seq=snap.last_seq)
            # restoring is not activity: updated_at_ms stays what the snapshot says
            return self.write(EventType.SESSION_RESTORED, payload, touch=False)

    def replay(self, events: Sequence[AgentEvent]) -> None:
        """Append events recorded by another process, applying their memory writes.

        For resuming a run: ``events`` continue this session's log (gapless from
        ``last_seq + 1``) and were produced by this same session's code, so applying them
        through the fold reproduces the memory they left. Listeners are not called: the events
        were published when they happened.

        Raises:
            ValueError: the events do not continue the log.
        """
        with self._lock:
            for event in events:
                if event.seq != self._last_seq + 1 or event.session_id != self.session_id:
                    raise ValueError(
                        f"event {event.seq} of {event.session_id!r} does not continue "
                        f"{self.session_id!r} at seq {self._last_seq + 1}"
                    )
                apply_event(self._memory, event)
                if isinstance(event.payload, CompactPayload):
                    self._last_compact = event.payload.result
                self._events.append(event)
                self._last_seq = event.seq

    def rollback(
        self, memory: MemorySnapshot, last_compact: CompactResult | None, *, run_id: str | None
    ) -> AgentEvent:
        """Undo a failed or cancelled run: reset memory with one full ``SESSION_RESTORED``.

        The aborted run's events stay in the log (sequence numbers keep counting) and the fold
        resets past them, so nothing of the run survives in memory.
        """
        with self._lock:
            self._last_compact = last_compact
            return self.write(
                EventType.SESSION_RESTORED,
                RestoredPayload(memory=memory, base_seq=self._last_seq),
                run_id=run_id,
            )

    def prune_events(self, up_to_seq: int) -> None:
        """Forget events up to ``up_to_seq`` held by this object (they are archived)."""
        with self._lock:
            self._events = [e for e in self._events if e.seq > up_to_seq]

    def record_applied(self, record: RunRecord, *, keep: int) -> None:
        """Remember an applied request (the newest ``keep`` are kept)."""
        with self._lock:
            self._applied.append(record)
            del self._applied[:-keep]

    def set_version(self, version: str | None) -> None:
        """Record the store version this session corresponds to."""
        self._version = version

    def mark_archived(self, seq: int) -> None:
        """Record that events up to ``seq`` are in the event archive."""
        self._archived_seq = max(self._archived_seq, seq)

    def unreconciled_outbox(self) -> tuple[tuple[AgentEvent, ...], int] | None:
        """The outbox loaded with this session's head and its writer's archive batch size, while
        it is unknown whether that writer archived it; None once reconciled."""
        if self._archive_trusted:
            return None
        return self._loaded_outbox, self._loaded_archive_batch

    def mark_reconciled(self) -> None:
        """Record that the archive's extent is known (see :mod:`tether.persistence.saving`)."""
        self._archive_trusted = True

    @property
    def archived_seq(self) -> int:
        """Events up to this sequence number are known to be archived."""
        return self._archived_seq

    def save(self) -> str:
        """Write this session to the agent's store (compare-and-set against the loaded version).

        Raises:
            StoreNotConfigured: the agent has no store.
            VersionConflict: someone else saved this session since it was loaded.
        """
        from tether.persistence.saving import save_session

        if self._agent.store is None:
            raise StoreNotConfigured(
                f"session {self.session_id!r} cannot be saved: the agent has no snapshot store; "
                "pass store=InMemorySnapshotStore() (or another store) to Agent(...)"
            )
        return save_session(self, self._agent.store, self._agent.archive)
