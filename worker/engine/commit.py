"""The commit of one run, in named steps.

A run's events reach the live stream while it runs (fenced by the lease, see
:class:`StreamPublisher`); its commit then takes these steps, in this order:

1. ``stream_flush``: append the events still buffered to the stream (fenced).
2. ``fence_check``: the lease is still ours and the stream accepted every event; else abort
   (the next holder retries the run from the last committed head).
3. ``wait_mark`` (only when the session has calls parked on the fleet, or the run settled
   one): the durable mark of a waiting session (see :mod:`tether.worker.engine.parking`).
4. ``head_put``: write the session head with compare-and-set on its version. **The commit
   point**: before it nothing of the run is committed, after it all of it is.
5. ``wait_index`` (same condition): the wait records and timers index the fleet wakes parked
   calls from, before the producer hears ``WAITING``.
   ``children`` (only for a child run, a continuation, or a cancelled run): the run's end told
   to its family, before ``finish``: a child's end recorded for its parent and the parent woken
   when its wait is over, a cancelled run's children cancelled
   (:mod:`tether.worker.engine.child_runs`).
6. ``finish``: record the run's result, pop it from the session queue, announce completion.
7. ``archive_segment``: when the head's outbox is full (a batch), write it to the archive as one
   immutable segment. Not every commit writes one. It comes after ``finish`` so that the
   producer does not wait for it: the head just written still holds the outbox, and a reader
   of a head whose outbox reached the batch asks the archive how far it goes
   (:func:`tether.persistence.saving.reconcile_loaded_outbox`), so a death in between loses
   nothing, and a segment written twice (by the next holder too) is byte for byte the same.
8. ``archive_hint``: remember how far the archive goes (a lossy optimisation).
9. ``checkpoint_clear``: forget the run's step checkpoint, when it wrote one (a leftover is
   harmless: the next attempt finds the head moved past it and drops it).

The drain then takes ``lease_release`` when the queue is empty (a drain lets ``finish`` release
the lease in the same round trip when it leaves the queue empty: the step then only reports
it). A crash between any two steps is recovered by the next lease holder: before ``head_put``
it reruns the request from the previous head (the dead attempt's stream events are superseded
by a higher fence); after it, the request id is in the head's applied set, so the run is
finished as recorded without running again.

A *probe* (:func:`install_probe`) is called before and after every step; tests use it to stop a
worker at each step and check that recovery gives exactly-once effect.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from tether.core.events import AgentEvent, EventType
from tether.errors import ConflictError, StreamGap, TetherError
from tether.observability.metrics import run_finished
from tether.persistence.archives.base import EventArchive
from tether.persistence.saving import (
    ARCHIVE_BATCH_EVENTS,
    ArchiveHint,
    archive_outbox,
    put_head,
)
from tether.persistence.stores.base import SnapshotStore
from tether.persistence.streams.base import EventStream
from tether.persistence.streams.redis import Rider, StreamMark
from tether.runs.contract import RunResult
from tether.runs.leases.base import Lease
from tether.runs.queue.base import IdleRelease, SessionQueue
from tether.runtime.session import AgentSession
from tether.worker.engine.checkpoints.base import CheckpointStore, MarkingStream
from tether.worker.engine.parking import Parking

log = logging.getLogger(__name__)


class CommitStep(StrEnum):
    """The named steps of a commit, in order (``lease_release`` is the drain's last)."""

    STREAM_FLUSH = "stream_flush"
    FENCE_CHECK = "fence_check"
    WAIT_MARK = "wait_mark"
    HEAD_PUT = "head_put"
    WAIT_INDEX = "wait_index"
    CHILDREN = "children"
    FINISH = "finish"
    ARCHIVE_SEGMENT = "archive_segment"
    ARCHIVE_HINT = "archive_hint"
    CHECKPOINT_CLEAR = "checkpoint_clear"
    LEASE_RELEASE = "lease_release"


Phase = Literal["before", "after"]


@dataclass(frozen=True)
class StepContext:
    """Where a probe is called: the step, its phase, and whose run."""

    step: CommitStep
    phase: Phase
    worker_id: str
    tenant: str
    session_id: str
    run_id: str | None


Probe = Callable[[StepContext], None]
_probes: list[Probe] = []
_probes_lock = threading.Lock()


def install_probe(probe: Probe) -> Callable[[], None]:
    """Call ``probe`` around every commit step of this process; returns its uninstaller."""
    with _probes_lock:
        _probes.append(probe)

    def uninstall() -> None:
        with _probes_lock:
            if probe in _probes:
                _probes.remove(probe)

    return uninstall


def probe(ctx: StepContext) -> None:
    """Call the installed probes (none in production)."""
    for installed in tuple(_probes):
        installed(ctx)


#: Flush buffered events to the stream before anything that may block (FINAL_OUTPUT is always
#: followed at once by STEP_END, which flushes both).
_FLUSH_ON = frozenset(
    {EventType.MODEL_REQUEST, EventType.TOOL_CALL, EventType.STEP_END, EventType.ERROR}
)
#: What a run whose checkpoints go with the stream's appends flushes itself: the loop marks a
#: checkpoint right after each TOOL_CALL batch and each STEP_END but the last (see
#: :mod:`tether.runtime.loop`), and that mark's one script appends them (the last STEP_END goes
#: with the commit's ``stream_flush``).
_FLUSH_ON_MARKED = frozenset({EventType.MODEL_REQUEST, EventType.ERROR})

#: ``backfill(after_seq, before_seq)``: the committed events strictly between the two.
Backfill = Callable[[int, int], list[AgentEvent]]


@dataclass(frozen=True)
class DeferredMark:
    """A step checkpoint to write with the publisher's next append (see
    :meth:`tether.worker.engine.resume.Checkpointer.defer`); ``written(True)`` once the append's
    script recorded it, ``written(False)`` when the append went out without it."""

    stream: MarkingStream
    mark: StreamMark
    written: Callable[[bool], None]


class StreamPublisher:
    """A session listener that appends its events to the live stream under the lease's fence.

    When the stream ends before the events start (the head moved on without it: an in-process
    save, or a Redis restored from an older snapshot), the missing committed events are filled
    in from ``backfill`` first, so the stream is whole again and the session is never stuck.
    """

    def __init__(self, stream: EventStream, lease: Lease, backfill: Backfill | None = None) -> None:
        self._stream = stream
        self._lease = lease
        self._backfill = backfill
        self._buffer: list[AgentEvent] = []
        self.failed: TetherError | None = None
        self.marking = False
        """A run whose checkpoints go with the appends is executing: its TOOL_CALL and STEP_END
        events wait for the checkpoint the loop marks right after them (:meth:`flush_marked`)."""
        self.deferred: DeferredMark | None = None
        """A checkpoint the next append records (with whatever is buffered by then)."""
        self.carrier: MarkingStream | None = None
        """The stream whose appends carry riders (:meth:`carry`); None: none are carried."""
        self._riders: list[Rider] = []

    def forget_pending(self) -> None:
        """Drop the deferred checkpoint and the riders of an attempt given up (the next one
        resumes from what was written; its pieces start the step again)."""
        self.deferred, self._riders = None, []

    def carry(self, rider: Rider) -> None:
        """Send ``rider`` (a model call's last live pieces) first in the next append's round
        trip (:meth:`tether.worker.engine.deltas.DeltaPublisher.hand_over`)."""
        self._riders.append(rider)

    def __call__(self, event: AgentEvent) -> None:
        self._buffer.append(event)
        if event.type in (_FLUSH_ON_MARKED if self.marking else _FLUSH_ON):
            self.flush()

    def flush(self) -> None:
        """Append buffered events (with the :attr:`deferred` checkpoint, if any); remember (not
        raise) a failure so the run can stop cleanly."""
        if self.deferred is not None:
            deferred, self.deferred = self.deferred, None
            deferred.written(self.flush_marked(deferred.stream, deferred.mark))
            return
        if not (self._buffer or self._riders) or self.failed is not None:
            return
        batch, self._buffer = self._buffer, []
        try:
            try:
                self._append(batch, self._take_riders())
            except StreamGap as gap:
                self._append([*self._missing(gap, batch[0].seq), *batch])
        except TetherError as exc:
            log.warning("stream append failed for %s: %s", self._lease.session_id, exc)
            self.failed = exc

    def flush_marked(self, stream: MarkingStream, mark: StreamMark) -> bool:
        """Append buffered events and record ``mark`` in the same script (one round trip); True
        when both were written. A stream that lacks events before the batch (see
        :meth:`_missing`) gets them the usual way and the mark is left to the caller (False);
        a failure is remembered as :meth:`flush` does (False)."""
        if self.failed is not None:
            return False
        batch, self._buffer = self._buffer, []
        lease = self._lease
        try:
            riders = self._take_riders()
            stream.append_marked(lease.tenant, lease.session_id, batch, lease.fence, mark, riders)
            return True
        except StreamGap:
            self._buffer = [*batch, *self._buffer]
            self.flush()
        except TetherError as exc:
            log.warning("stream append failed for %s: %s", lease.session_id, exc)
            self.failed = exc
        return False

    def _take_riders(self) -> list[Rider]:
        riders, self._riders = self._riders, []
        return riders

    def _append(self, events: list[AgentEvent], riders: list[Rider] | None = None) -> None:
        lease = self._lease
        if riders and self.carrier is not None:
            self.carrier.append_marked(
                lease.tenant, lease.session_id, events, lease.fence, None, riders
            )
        elif events:
            self._stream.append(lease.tenant, lease.session_id, events, lease.fence)

    def _missing(self, gap: StreamGap, before_seq: int) -> list[AgentEvent]:
        """The committed events the stream lacks, or the gap itself when they are gone too."""
        missing = self._backfill(gap.last_seq, before_seq) if self._backfill else []
        if [e.seq for e in missing] != list(range(gap.last_seq + 1, before_seq)):
            raise gap
        log.info(
            "repairing the live stream of %s/%s: seq %d-%d from the head and the archive",
            self._lease.tenant,
            self._lease.session_id,
            gap.last_seq + 1,
            before_seq - 1,
        )
        return missing


@dataclass(frozen=True)
class CommitTarget:
    """The backends one commit writes to."""

    store: SnapshotStore
    archive: EventArchive | None
    hint: ArchiveHint | None
    queue: SessionQueue
    worker_id: str
    checkpoints: CheckpointStore
    archive_batch_events: int = ARCHIVE_BATCH_EVENTS


class Commit:
    """Runs the steps of one commit, calling the probes around each."""

    def __init__(
        self,
        target: CommitTarget,
        lease: Lease,
        run_id: str | None,
        reply_to: str | None = None,
        *,
        release_when_idle: bool = False,
        expect_idle: bool = False,
        on_end: Callable[[RunResult], None] | None = None,
    ) -> None:
        self._target = target
        #: The ``children`` step's action on the run's result (None: the step is not taken).
        self.on_end = on_end
        self._lease = lease
        self._run_id = run_id
        self._reply_to = reply_to
        self.finished = False
        #: The result :meth:`finish` recorded (announced to webhooks after the commit).
        self.result: RunResult | None = None
        #: After :meth:`finish`: the run id then at the head of the session's queue (None: empty).
        self.next_head: str | None = None
        #: After :meth:`finish` with ``release_when_idle``: what releasing the lease did (None:
        #: runs are queued, nothing was released).
        self.released: IdleRelease | None = None
        #: Release the lease in the finish step when it leaves the queue empty.
        self.release_when_idle = release_when_idle
        #: The run is the only one queued, as far as the claim saw (a hint for the finish).
        self.expect_idle = expect_idle

    @property
    def run_id(self) -> str | None:
        """The run this commit is for (None: a lease release)."""
        return self._run_id

    def _step(self, step: CommitStep, phase: Phase) -> None:
        probe(
            StepContext(
                step=step,
                phase=phase,
                worker_id=self._target.worker_id,
                tenant=self._lease.tenant,
                session_id=self._lease.session_id,
                run_id=self._run_id,
            )
        )

    def run(
        self,
        session: AgentSession,
        publisher: StreamPublisher,
        lease_lost: Callable[[], bool],
        result: RunResult,
        *,
        checkpointed: bool = False,
        parking: Parking | None = None,
    ) -> None:
        """Commit ``session`` (the run applied) and finish ``result``; forget the run's step
        checkpoint when it has one (``checkpointed``); record what the session waits for
        (``parking``).

        Raises:
            ConflictError: the lease or the stream was lost; nothing was committed.
            VersionConflict: another writer saved the head first; nothing was committed.
        """
        t = self._target
        self._step(CommitStep.STREAM_FLUSH, "before")
        publisher.flush()
        self._step(CommitStep.STREAM_FLUSH, "after")
        self._step(CommitStep.FENCE_CHECK, "before")
        if publisher.failed is not None or lease_lost():
            raise ConflictError(
                f"lease or stream of {self._lease.tenant}/{self._lease.session_id} lost before "
                f"committing run {self._run_id}; the next lease holder retries it"
            )
        self._step(CommitStep.FENCE_CHECK, "after")
        if parking is not None:
            self._take(CommitStep.WAIT_MARK, parking.mark)
        self._step(CommitStep.HEAD_PUT, "before")
        outbox = put_head(
            session,
            t.store,
            t.archive,
            archive_batch_events=t.archive_batch_events,
            hint=t.hint,
            writer_fence=self._lease.fence,
        )
        self._step(CommitStep.HEAD_PUT, "after")
        if parking is not None:
            self._take(CommitStep.WAIT_INDEX, parking.record)
        # the producer hears of its run before the amortized archive write: a death between
        # the two is the case put_head's reader already handles (the head keeps the outbox)
        self.finish(result)
        if outbox:
            self._archive(session, outbox)
        session.prune_events(session.archived_seq)
        if checkpointed:
            self._step(CommitStep.CHECKPOINT_CLEAR, "before")
            t.checkpoints.clear(self._lease.tenant, self._lease.session_id, result.run_id)
            self._step(CommitStep.CHECKPOINT_CLEAR, "after")

    def _take(self, step: CommitStep, action: Callable[[], None]) -> None:
        """One step around ``action``."""
        self._step(step, "before")
        action()
        self._step(step, "after")

    def repark(self, parking: Parking | None) -> None:
        """The ``wait_index`` step of a run finished as found (committed by an attempt that
        died before its finish)."""
        if parking is not None:
            self._take(CommitStep.WAIT_INDEX, parking.record)

    def _archive(self, session: AgentSession, outbox: list[AgentEvent]) -> None:
        """The ``archive_segment`` and ``archive_hint`` steps: the head's full outbox as one
        segment, then how far the archive goes."""
        t = self._target
        assert t.archive is not None
        self._step(CommitStep.ARCHIVE_SEGMENT, "before")
        archive_outbox(session, t.archive, outbox)
        self._step(CommitStep.ARCHIVE_SEGMENT, "after")
        if t.hint is not None:
            self._step(CommitStep.ARCHIVE_HINT, "before")
            t.hint.record(session.tenant, session.session_id, outbox[-1].seq)
            self._step(CommitStep.ARCHIVE_HINT, "after")

    def finish(self, result: RunResult) -> None:
        """The ``finish`` step alone (also for runs that end without a commit)."""
        on_end = self.on_end
        if on_end is not None and result.run_id == self._run_id:
            self._take(CommitStep.CHILDREN, lambda: on_end(result))
        self._step(CommitStep.FINISH, "before")
        queue = self._target.queue
        if self.release_when_idle:
            self.next_head, self.released = queue.finish_and_release(
                result, self._lease, reply_to=self._reply_to, expect_idle=self.expect_idle
            )
        else:
            self.next_head = queue.finish(result, reply_to=self._reply_to)
        self.finished = True
        self.result = result
        run_finished(result)
        self._step(CommitStep.FINISH, "after")

    def release(self, release: Callable[[], object]) -> object:
        """The ``lease_release`` step around ``release``."""
        self._step(CommitStep.LEASE_RELEASE, "before")
        outcome = release()
        self._step(CommitStep.LEASE_RELEASE, "after")
        return outcome
