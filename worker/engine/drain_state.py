"""What one drain holds under its lease between the runs it applies: the session, the last
commit, the claim that took the lease, and where the next run comes from (see
:func:`tether.worker.engine.cycle.drain`).

Its fields change only through the named transitions below, each written once: the held
session through :meth:`DrainState.hold`, :meth:`~DrainState.forget_session` and
:meth:`~DrainState.start_execution`; the claim through :meth:`~DrainState.take_claim` and
:meth:`~DrainState.undo_claim`; the run being applied through :meth:`~DrainState.begin_run` and
:meth:`~DrainState.commit`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.core.events import AgentEvent, EventType
from tether.runs.contract import RunRef, RunRequest
from tether.runs.leases.base import Lease
from tether.runs.queue.base import IdleRelease
from tether.runtime.session import AgentSession
from tether.worker.engine.child_runs import family_hook
from tether.worker.engine.claim import Claim
from tether.worker.engine.commit import Commit, CommitTarget, StreamPublisher
from tether.worker.engine.lease_keeper import LeaseKeeper
from tether.worker.engine.resume import Resumed
from tether.worker.engine.services import EngineServices


@dataclass
class DrainState:
    """One drain's state: its lease, and the session it holds between runs."""

    services: EngineServices
    lease: Lease
    keeper: LeaseKeeper
    target: CommitTarget
    processed: int = 0
    """How many runs this drain finished."""
    claimed: Claim | None = None
    """The claim that took the lease, until its head run is taken up (once)."""
    applying: Claim | None = None
    """The claim of the run being applied, when the claim read it: its record, its checkpoint,
    and whether it began it (then it just saw no stop request, so the run's first step boundary
    need not ask again: a stop asked after the claim is seen at the next one)."""
    applied: RunRequest | None = None
    """The request of the run being applied (for :attr:`EngineServices.on_finished`)."""
    last_commit: Commit | None = None
    finish_released: IdleRelease | None = None
    """What the last run's finish did to the lease when it emptied the queue."""
    session: AgentSession | None = None
    """The held session (None: the next run restores the committed head)."""
    agent_name: str | None = None
    """The agent :attr:`session` was restored for."""
    base_seq: int = 0
    """The committed head's last_seq under the session held now."""
    resumed: Resumed | None = None
    """Set when the held session was rebuilt at the next run's last checkpoint."""
    announce: AgentEvent | None = None
    """The held session's ``SESSION_RESTORED``, published when a run first executes on it: a
    run refused before it executes (a settlement of no pending call) publishes nothing."""

    def __post_init__(self) -> None:
        self.publisher = StreamPublisher(
            self.services.stream, self.lease, backfill=self.committed_between
        )

    # --- the held session -----------------------------------------------------------------

    def hold(
        self, session: AgentSession, agent_name: str, *, resumed: Resumed | None = None
    ) -> AgentSession:
        """Make ``session`` the held one, publishing from now on; its restore event is
        announced when a run first executes on it, unless it was ``resumed`` (the replayed
        events were published when they happened)."""
        session.add_listener(self.publisher)
        last = session.events[-1] if session.events else None
        restored = last if last is not None and last.type is EventType.SESSION_RESTORED else None
        self.session, self.agent_name, self.resumed = session, agent_name, resumed
        self.announce = None if resumed is not None else restored
        return session

    def forget_session(self) -> None:
        """Drop the held session (it may be stale, or hold steps that were never committed, or
        was restored for a run refused before it executed, and is never announced): the next
        run restores the committed head."""
        self.session = self.agent_name = self.resumed = self.announce = None

    def start_execution(self) -> Resumed | None:
        """A run starts executing on the held session: publish its restore (once), and hand
        over the checkpoint it was rebuilt at, if any (once)."""
        resumed, self.resumed = self.resumed, None
        if self.announce is not None:
            self.publisher(self.announce)
            self.announce = None
        return resumed

    # --- the run being applied ------------------------------------------------------------

    def begin_run(self, request: RunRequest) -> None:
        """``request``'s run is the one being applied (announced once it finished)."""
        self.applied = request

    def commit(self, run_id: str | None, reply_to: str | None = None) -> Commit:
        """The commit of ``run_id`` (None: the lease release), remembered as the last one."""
        # the finish that empties the queue also frees the lease: one round trip, not two
        claim = self.applying
        alone = claim is not None and claim.head == run_id and claim.queued == 1
        self.last_commit = Commit(
            self.target,
            self.lease,
            run_id,
            reply_to,
            release_when_idle=run_id is not None,
            expect_idle=alone,
            on_end=family_hook(self.services, self._ending(run_id), lambda: self.session),
        )
        return self.last_commit

    def _ending(self, run_id: str | None) -> RunRequest | None:
        """The request of ``run_id`` when it is the run being applied, for the ``children``
        step: a child's end, a continuation's, or a cancel (None: the step is not taken)."""
        request = self.applied
        if run_id is None or request is None or request.run_id != run_id:
            return None
        return request

    # --- the queue ------------------------------------------------------------------------

    def next_run(self) -> str | None:
        """The run id at the head of the session's queue: what the claim or the last ``finish``
        answered (no read), else one read of the queue."""
        self.finish_released = None
        if self.claimed is not None:
            if self.claimed.head is not None:
                return self.claimed.head  # taken up (and cleared) by take_claim
            # the claim saw an empty queue; once answered, a run queued since (the release
            # found one) is read from the queue, or the drain would spin on this answer
            self.claimed = None
            return None
        last, self.last_commit = self.last_commit, None
        if last is not None and last.finished:
            self.finish_released = last.released
            return last.next_head
        return self.services.runs.head(self.lease.tenant, self.lease.session_id)

    def release_if_idle(self) -> IdleRelease:
        """Release the lease when the queue is empty: what the last finish did, when it did."""
        if self.finish_released is not None:
            return self.finish_released
        return self.services.runs.release_if_idle(self.lease)

    def take_claim(self, run_id: str) -> Claim | None:
        """The claim, once, when ``run_id`` is the run it read (and maybe began)."""
        claim, self.claimed = self.claimed, None
        self.applying = claim if claim is not None and claim.head == run_id else None
        return self.applying

    def undo_claim(self) -> None:
        """Hand back the attempt the claim counted for a run this drain will not apply."""
        claim, self.claimed = self.claimed, None
        if claim is not None and claim.begun and claim.head is not None:
            self.services.runs.hand_back(
                RunRef(self.lease.tenant, self.lease.session_id, claim.head)
            )

    def committed_between(self, after_seq: int, before_seq: int) -> list[AgentEvent]:
        """Committed events with ``after_seq < seq < before_seq``: from the held session's log
        (the head's outbox), the rest from the archive."""
        held = [e for e in (self.session.events if self.session else []) if e.seq < before_seq]
        found = {e.seq: e for e in held if e.seq > after_seq}
        if len(found) < before_seq - after_seq - 1:
            t, s = self.lease.tenant, self.lease.session_id
            for event in self.services.archive.read(t, s, after_seq=after_seq):
                if event.seq < before_seq:
                    found.setdefault(event.seq, event)
        return [found[seq] for seq in sorted(found)]
