"""Step durability on a worker: record checkpoints while a run goes, resume a run cut short.

With ``durability="step"`` the :class:`Checkpointer` is the loop's checkpoint hook: it flushes
the run's buffered events to the live stream (fenced) and records how far they go
(:class:`~tether.worker.engine.checkpoints.base.Checkpoint`, fenced too). :func:`resume_point`
is what the next lease holder does before it would start the run again: it finds the checkpoint,
reads the recorded events from the stream, replays them onto the committed head, and hands the
loop the run's :class:`~tether.runtime.progress.RunProgress`. A checkpoint that no longer fits
(the head moved, the stream lost events) is dropped and the run starts over from the head.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tether.core.context import CompactResult
from tether.core.events import AgentEvent, EventType
from tether.core.history import memory_at
from tether.core.memory import MemorySnapshot
from tether.core.snapshot import SessionSnapshot
from tether.errors import InvalidInput, TetherError
from tether.persistence.stores.base import StoredSnapshot
from tether.persistence.streams.redis import StreamMark
from tether.runs.contract import RunRequest
from tether.runs.leases.base import Lease
from tether.runs.rerun import rerun_mark
from tether.runtime.agent import Agent
from tether.runtime.progress import RunProgress, progress_of
from tether.runtime.session import AgentSession
from tether.worker.engine.checkpoints.base import Checkpoint
from tether.worker.engine.commit import DeferredMark, StreamPublisher
from tether.worker.engine.services import EngineServices

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resumed:
    """A session rebuilt up to a run's last checkpoint."""

    session: AgentSession
    progress: RunProgress
    before: tuple[MemorySnapshot, CompactResult | None]
    """Memory before the run (what a failed or cancelled run rolls back to)."""


#: ``resume_point(checkpoint=ASK)``: read the run's checkpoint from the store.
ASK = object()


def resume_point(
    services: EngineServices,
    agent: Agent,
    request: RunRequest,
    stored: StoredSnapshot | None,
    *,
    checkpoint: Checkpoint | object | None = ASK,
) -> Resumed | None:
    """The session at ``request``'s last checkpoint on top of ``stored``, or None.

    ``checkpoint`` is the run's newest checkpoint when the caller already read it (the claim
    does), else it is read here.
    """
    t, s = request.tenant, request.session_id
    if checkpoint is ASK:
        checkpoint = services.checkpoints.load(t, s, request.run_id)
    assert checkpoint is None or isinstance(checkpoint, Checkpoint)
    if checkpoint is None:
        return rerun_point(agent, request, stored)
    base_seq = stored.snapshot.last_seq if stored is not None else 0
    events = _recorded(services, request, checkpoint, base_seq)
    # a rerun's steps kept in its fork count as this run's, for its totals
    progress = progress_of(request.run_id, [*_kept(request, stored), *events]) if events else None
    if progress is None:
        log.warning(
            "run %s: checkpoint at seq %d unusable; starting over from the head",
            request.run_id,
            checkpoint.last_seq,
        )
        services.checkpoints.clear(t, s, request.run_id)
        return None
    session, before = _replayed(agent, request, stored, events)
    log.info(
        "run %s resumed at step %d from seq %d",
        request.run_id,
        progress.next_step,
        checkpoint.last_seq,
    )
    return Resumed(session, progress, before)


def _replayed(
    agent: Agent, request: RunRequest, stored: StoredSnapshot | None, events: list[AgentEvent]
) -> tuple[AgentSession, tuple[MemorySnapshot, CompactResult | None]]:
    """The session at the checkpoint (``events`` replayed onto ``stored``), and the memory a
    failure of the rest of the run rolls back to."""
    if stored is None:
        session = agent.new_session(request.session_id, tenant=request.tenant)
        before: tuple[MemorySnapshot, CompactResult | None] = (MemorySnapshot(), None)
    else:
        session = agent.session_from_snapshot(
            stored.snapshot, version=stored.version, by_reference=True, announce=False
        )
        session.mark_archived(stored.snapshot.archived_seq)
        before = (stored.snapshot.memory, stored.snapshot.last_compact)
    settled = _settlements(events)
    if settled:  # what a rollback keeps: the calls this continuation settled (see execution)
        session.replay(events[:settled])
        before = (session.memory_snapshot(), session.last_compact)
    session.replay(events[settled:])
    return session, before


def rerun_point(agent: Agent, request: RunRequest, stored: StoredSnapshot | None) -> Resumed | None:
    """The session at the step a rerun goes on from, when ``request`` is the run a rerun's fork
    is marked for (:mod:`tether.runs.rerun`) and the fork has not applied it yet; else None.

    The fork holds the source run's steps before the rerun's step as recorded: the loop goes on
    after them, as after a checkpoint, without asking the model or running a tool of theirs.
    """
    kept = _kept(request, stored)
    if not kept or stored is None:
        return None
    progress = progress_of(request.run_id, kept)
    if progress is None:
        return None
    snapshot = stored.snapshot
    session = agent.session_from_snapshot(
        snapshot, version=stored.version, by_reference=True, announce=False
    )
    session.mark_archived(snapshot.archived_seq)
    log.info("run %s goes on at step %d of a rerun's fork", request.run_id, progress.next_step)
    return Resumed(session, progress, _before(snapshot, kept[0].seq))


def _kept(request: RunRequest, stored: StoredSnapshot | None) -> list[AgentEvent]:
    """The source run's events a rerun's fork holds for ``request``, under its run id."""
    if stored is None:
        return []
    head = stored.snapshot
    mark = rerun_mark(head.metadata.attributes)
    if mark is None or mark.request_id != request.request_id:
        return []
    if any(record.request_id == request.request_id for record in head.applied):
        return []  # applied already: the attempt finishes it as committed
    return [
        e.model_copy(update={"run_id": request.run_id})
        for e in head.events
        if e.run_id == mark.source_run_id
    ]


def _before(head: SessionSnapshot, first_seq: int) -> tuple[MemorySnapshot, CompactResult | None]:
    """Memory before a rerun's kept steps (what a failed rerun rolls back to)."""
    if first_seq <= 1:
        return MemorySnapshot(), None
    try:
        _, memory, last_compact = memory_at(head.events, first_seq - 1)
    except InvalidInput:  # the fork's outbox no longer starts at seq 1: keep the fork's memory
        return head.memory, head.last_compact
    return memory, last_compact


def _recorded(
    services: EngineServices, request: RunRequest, checkpoint: Checkpoint, base_seq: int
) -> list[AgentEvent]:
    """The checkpointed events, or [] when the stream no longer holds all of them, or holds
    events another run wrote at those places (a stream rebuilt or appended to out of band):
    every event replayed must be this run's. The attempt is the checkpoint's: it was saved
    under its lease's fence (a stale attempt's save is refused), and the stream is fenced the
    same way, so events between the head and the checkpoint are that attempt's or an earlier
    attempt's of the same run, which it resumed from."""
    if (
        checkpoint.run_id != request.run_id
        or checkpoint.base_seq != base_seq
        or checkpoint.last_seq <= base_seq
    ):
        return []
    events = [
        e
        for e in services.stream.read(request.tenant, request.session_id, after_seq=base_seq)
        if e.seq <= checkpoint.last_seq
    ]
    expected = list(range(base_seq + 1, checkpoint.last_seq + 1))
    if [e.seq for e in events] != expected:
        return []
    # the drain's announcement of the head it restored comes just before the run's first
    # event (no run id: a restore is no run's doing); it changes no memory
    own = events[1:] if events and _restore_announcement(events[0], base_seq) else events
    foreign = {e.run_id for e in own} - {request.run_id}
    if foreign:
        log.warning(
            "run %s: the events its checkpoint covers (seq %d..%d) include events of %s; "
            "not replaying them",
            request.run_id, base_seq + 1, checkpoint.last_seq, sorted(map(str, foreign)),
        )  # fmt: skip
        return []
    return events


def _settlements(events: list[AgentEvent]) -> int:
    """How many of a run's first events are its settlements of pending calls (with the restore
    announcement before them): 0 when it settled none."""
    end = 0
    for n, event in enumerate(events):
        if event.type is EventType.TOOL_OUTPUT_REPLACED:
            end = n + 1
        elif event.type is not EventType.SESSION_RESTORED:
            break
    return end


def _restore_announcement(event: AgentEvent, base_seq: int) -> bool:
    """Whether ``event`` is a drain's ``SESSION_RESTORED`` of the head at ``base_seq``."""
    return (
        event.type is EventType.SESSION_RESTORED
        and event.run_id is None
        and event.seq == base_seq + 1
    )


class Checkpointer:
    """The loop's checkpoint hook for one run of a drain.

    A boundary whose only new events since the last checkpoint are ``STEP_END`` writes nothing:
    the checkpoint after the step's last tool result already holds every call and result, and a
    run resumed from it closes the step again (see :func:`tether.runtime.loop._resume`). And
    that checkpoint itself is written with the run's next append (:meth:`defer`): the next
    step's ``MODEL_REQUEST``, before the model is asked. So a tool step costs one write of its
    own (the calls recorded) besides the request's append, where it cost two.
    """

    def __init__(
        self,
        services: EngineServices,
        lease: Lease,
        publisher: StreamPublisher,
        session: AgentSession,
        run_id: str,
        base_seq: int,
    ) -> None:
        self._services = services
        self._lease = lease
        self._publisher = publisher
        self._session = session
        self._run_id = run_id
        self._base_seq = base_seq
        self.saved = False
        self.failed: TetherError | None = None
        self._saved_seq: int | None = None
        self._deferred: Checkpoint | None = None

    @property
    def pending(self) -> bool:
        """A deferred checkpoint waits for the run's next append."""
        return self._deferred is not None

    def _only_step_ends_since_saved(self) -> bool:
        """Whether every event after the last saved (or deferred) checkpoint is a ``STEP_END``."""
        seq = self._deferred.last_seq if self._deferred is not None else self._saved_seq
        if seq is None:
            return False
        newer = self._session.events_after(seq)
        return bool(newer) and all(e.type is EventType.STEP_END for e in newer or ())

    def _checkpoint(self) -> Checkpoint:
        return Checkpoint(
            run_id=self._run_id,
            fence=self._lease.fence,
            base_seq=self._base_seq,
            last_seq=self._session.last_seq,
        )

    def _mark(self, checkpoint: Checkpoint) -> StreamMark:
        ttl_s = self._services.settings.result_ttl_s
        return StreamMark(self._run_id, checkpoint.model_dump_json(), ttl_s)

    def defer(self) -> None:
        """The checkpoint after a step's last tool result, written with the run's next append:
        the next step's ``MODEL_REQUEST`` (appended before the model is asked), an ``ERROR``,
        the commit's flush, or a hand-back (:meth:`write_pending`). Between the two the loop
        runs no tool and asks no model (a step with a compaction policy before it is marked at
        once: the policy may ask one), so a crash there redoes nothing a checkpoint could have
        kept but the step's last result, with no effect in between."""
        step_marks = self._services.step_marks
        if self.failed is not None or step_marks is None:
            self()
            return
        self._deferred = checkpoint = self._checkpoint()
        self._publisher.deferred = DeferredMark(
            step_marks, self._mark(checkpoint), lambda written: self._written(checkpoint, written)
        )

    def write_pending(self) -> None:
        """Write the deferred checkpoint now (the run stops at this boundary)."""
        if self._deferred is not None:
            self._publisher.flush()

    def _written(self, checkpoint: Checkpoint, written: bool) -> None:
        self._deferred = None
        if written:
            self.saved, self._saved_seq = True, checkpoint.last_seq
        elif self._publisher.failed is None:
            self._save(checkpoint)

    def __call__(self) -> None:
        """Flush the run's events, then record how far they go (a failure stops the run): in
        one script when the services mark checkpoints with the stream's appends."""
        if self.failed is not None or self._only_step_ends_since_saved():
            return
        self._deferred, self._publisher.deferred = None, None  # this one covers it
        checkpoint = self._checkpoint()
        step_marks = self._services.step_marks
        if step_marks is not None and self._publisher.flush_marked(
            step_marks, self._mark(checkpoint)
        ):
            self.saved, self._saved_seq = True, checkpoint.last_seq
            return
        self._publisher.flush()
        if self._publisher.failed is not None:
            return
        self._save(checkpoint)

    def _save(self, checkpoint: Checkpoint) -> None:
        try:
            self._services.checkpoints.save(self._lease.tenant, self._lease.session_id, checkpoint)
        except TetherError as exc:
            log.warning("checkpoint of run %s failed: %s", self._run_id, exc)
            self.failed = exc
            return
        self.saved, self._saved_seq = True, checkpoint.last_seq
