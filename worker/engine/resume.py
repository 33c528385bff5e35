"""Step durability on a worker: record checkpoints while a run goes, resume a run cut short.

With ``durability="step"`` the :class:`Checkpointer` is the loop's checkpoint hook: it flushes
the run's buffered events to the live stream (fenced) and records how far they go
(:class:`~tether.worker.engine.checkpoints.base.Checkpoint`, fenced too). :func:`resume_point` is
what the
next lease holder does before it would start the run again: it finds the checkpoint, reads the
recorded events from the stream, replays them onto the committed head, and hands the loop the
run's :class:`~tether.runtime.progress.RunProgress`. A checkpoint that no longer fits (the head
moved, the stream lost events) is dropped and the run starts over from the head.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tether.core.context import CompactResult
from tether.core.events import AgentEvent
from tether.core.memory import MemorySnapshot
from tether.errors import TetherError
from tether.persistence.stores.base import StoredSnapshot
from tether.runs.contract import RunRequest
from tether.runs.leases.base import Lease
from tether.runtime.agent import Agent
from tether.runtime.progress import RunProgress, progress_of
from tether.runtime.session import AgentSession
from tether.worker.engine.checkpoints.base import Checkpoint
from tether.worker.engine.commit import StreamPublisher
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
    rt: EngineServices,
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
        checkpoint = rt.checkpoints.load(t, s, request.run_id)
    assert checkpoint is None or isinstance(checkpoint, Checkpoint)
    if checkpoint is None:
        return None
    base_seq = stored.snapshot.last_seq if stored is not None else 0
    events = _recorded(rt, request, checkpoint, base_seq)
    progress = progress_of(request.run_id, events) if events else None
    if progress is None:
        log.warning("run %s: checkpoint at seq %d unusable; starting over from the head",
                    request.run_id, checkpoint.last_seq)
        rt.checkpoints.clear(t, s, request.run_id)
        return None
    if stored is None:
        session = agent.new_session(s, tenant=t)
        before: tuple[MemorySnapshot, CompactResult | None] = (MemorySnapshot(), None)
    else:
        session = agent.session_from_snapshot(
            stored.snapshot, version=stored.version, by_reference=True, announce=False
        )
        session.mark_archived(stored.snapshot.archived_seq)
        before = (stored.snapshot.memory, stored.snapshot.last_compact)
    session.replay(events)
    log.info("run %s resumed at step %d from seq %d", request.run_id, progress.next_step,
             checkpoint.last_seq)
    return Resumed(session, progress, before)


def _recorded(
    rt: EngineServices, request: RunRequest, checkpoint: Checkpoint, base_seq: int
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
        for e in rt.stream.read(request.tenant, request.session_id, after_seq=base_seq)
        if e.seq <= checkpoint.last_seq
    ]
    expected = list(range(base_seq + 1, checkpoint.last_seq + 1))
    if [e.seq for e in events] != expected:
        return []
    foreign = {e.run_id for e in events} - {request.run_id}
    if foreign:
        log.warning(
            "run %s: the events its checkpoint covers (seq %d..%d) include events of %s; "
            "not replaying them",
            request.run_id, base_seq + 1, checkpoint.last_seq, sorted(map(str, foreign)),
        )  # fmt: skip
        return []
    return events


class Checkpointer:
    """The loop's checkpoint hook for one run of a drain."""

    def __init__(
        self,
        rt: EngineServices,
        lease: Lease,
        publisher: StreamPublisher,
        session: AgentSession,
        run_id: str,
        base_seq: int,
    ) -> None:
        self._rt = rt
        self._lease = lease
        self._publisher = publisher
        self._session = session
        self._run_id = run_id
        self._base_seq = base_seq
        self.saved = False
        self.failed: TetherError | None = None

    def __call__(self) -> None:
        """Flush the run's events, then record how far they go (a failure stops the run)."""
        self._publisher.flush()
        if self._publisher.failed is not None or self.failed is not None:
            return
        checkpoint = Checkpoint(
            run_id=self._run_id,
            fence=self._lease.fence,
            base_seq=self._base_seq,
            last_seq=self._session.last_seq,
        )
        try:
            self._rt.checkpoints.save(self._lease.tenant, self._lease.session_id, checkpoint)
        except TetherError as exc:
            log.warning("checkpoint of run %s failed: %s", self._run_id, exc)
            self.failed = exc
            return
        self.saved = True
