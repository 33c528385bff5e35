"""The run-queue seam: run records, per-session FIFO queues, cancel flags, completions.

A run request enters through :meth:`Submissions.submit_many` (idempotent per request id): it is
indexed by ``(tenant, session, request_id)``, gets a run record, and its run id is appended to
the session's queue. The worker holding the session's lease applies queued runs in queue order
(:class:`SessionQueue`), so runs of one session apply in submission order; :meth:`finish` records
the result, pops the run and announces it on the completion feed producers read
(:class:`Completions`). :class:`Recovery` finds sessions whose worker died.

Implementations: :class:`~tether.runs.queue.redis.RedisRunQueue` (production) and
:class:`~tether.runs.queue.memory.InMemoryRunQueue` (tests, in-process cycles); both pass
``tests/test_run_queue_contract.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple, Protocol

from tether.runs.contract import BusyPolicy, RunRef, RunRequest, RunResult
from tether.runs.leases.base import Lease
from tether.runs.queue.record import RunState as RunState  # the seam's callers name it here
from tether.runs.usage.base import TenantUsage

#: Completion feeds keep about this many newest entries.
DONE_MAX_LEN = 100_000
#: A producer's feed entry carries the run's result when its JSON is at most this long.
FEED_RESULT_MAX_BYTES = 2048


class SubmitState(StrEnum):
    """What a submission did."""

    QUEUED = "queued"
    DUPLICATE = "duplicate"
    """The request id was known: ``run_id`` is the run it created first."""
    BUSY = "busy"
    """``on_busy='reject'`` and the session had queued runs: nothing was queued."""
    TAKEN = "taken"
    """Another request already used this run id: nothing was queued."""


class IdleRelease(StrEnum):
    """What :meth:`SessionQueue.release_if_idle` did."""

    RELEASED = "released"
    BUSY = "busy"
    """Runs are queued: the lease is kept."""
    LOST = "lost"
    """The lease is no longer ours."""


class CancelOutcome(StrEnum):
    """What :meth:`Cancellation.request_cancel` did."""

    CANCELLED = "cancelled"
    """The run was queued: it will never start (``begin`` refuses it)."""
    REQUESTED = "requested"
    """The run is running: it stops at its next step boundary, unless it finishes first."""
    FINISHED = "finished"
    """The run already has a result: nothing changes."""
    UNKNOWN = "unknown"
    """No such run (or its record expired)."""


class StopMode(StrEnum):
    """How a running run is asked to stop at its next step boundary."""

    CANCEL = "cancel"
    """Roll it back: nothing of it stays in memory (a cancel, ``on_busy='rollback'``)."""
    INTERRUPT = "interrupt"
    """Keep the steps it finished (``on_busy='interrupt'``)."""


@dataclass(frozen=True)
class SubmitOutcome:
    """What :meth:`Submissions.submit_many` did for one request."""

    run_id: str
    state: SubmitState


@dataclass(frozen=True)
class RunView:
    """A run record."""

    run_id: str
    status: str
    tenant: str
    session_id: str
    request_id: str
    request: RunRequest | None
    result: RunResult | None
    submitted_at_ms: int
    started_at_ms: int
    last_error: str | None = None
    retry_at_ms: int = 0
    queue: str | None = None
    failed_before_commit: int = 0
    """Attempts that failed before they could write anything (the head was unreadable)."""
    waiting: str | None = None
    """What the running run waits for now (``"model budget"``), else None."""

    @property
    def ref(self) -> RunRef:
        """Where this run lives."""
        return RunRef(self.tenant, self.session_id, self.run_id)


class Submissions(Protocol):
    """The producer's side: submit runs and read their records."""

    def submit_many(
        self, requests: Sequence[RunRequest], *, queue: str | None = None
    ) -> list[SubmitOutcome]:
        """Register and queue each request unless its request id is known (idempotent).

        ``queue`` names the broker queue whose workers serve the runs' agents: crash recovery
        and hand-overs send the session's drain task there (None: the worker's own queue).
        """

    def restricted(self) -> bool:
        """True when this queue's credential may not read the namespace's own keys: a tenant's
        ACL user (docs/trust-model.md), as a producer of a deployment with per-tenant users."""

    def record_rejected(self, result: RunResult, *, reply_to: str | None = None) -> bool:
        """Record a run that never entered a session queue (invalid, unknown agent, busy), and
        announce it (to producer ``reply_to`` too, when given).

        A run id that already has a record is never rewritten (a forged message reusing a
        queued run's id cannot fail it): then nothing is recorded and False is returned.
        """

    def locate(self, tenant: str, run_id: str) -> RunRef | None:
        """Where ``tenant``'s run ``run_id`` lives (None when the tenant has no such run): how a
        bare run id (``tether wait RUN_ID``) finds its session. Another tenant's run is not
        found: the index is per tenant."""

    def get(self, ref: RunRef) -> RunView | None:
        """The run record, or None when unknown or expired."""

    def peek_many(self, refs: Sequence[RunRef]) -> dict[str, RunResult | None]:
        """For each run with a record, by run id: its result (None while unfinished), in one
        call.

        Runs without a record (unknown, expired, lost) are absent from the answer.
        """


class SessionQueue(Protocol):
    """The worker's side, under the session's lease: claim, apply and finish runs in order."""

    def head(self, tenant: str, session_id: str) -> str | None:
        """The run id at the head of the session's queue."""

    def begin(self, ref: RunRef, worker: str) -> int | None:
        """Count one more attempt of the run and mark it running on ``worker``; the attempt
        count, or None (nothing changed) when a cancel was requested before it started. One
        atomic step with :meth:`Cancellation.request_cancel`, so a run reported ``CANCELLED``
        never starts. Never creates a record for an unknown run."""

    def hand_back(self, ref: RunRef) -> None:
        """Undo :meth:`begin` for an attempt handed back unfinished (a worker shutting down):
        it was no failure, so it does not count against the attempt budget."""

    def note_failure(
        self, ref: RunRef, error: str, *, retry_after_ms: int = 0, before_commit: bool = False
    ) -> None:
        """Remember why an attempt failed (and not to retry it before ``retry_after_ms``);
        ``before_commit``: it failed before it could write anything (counted, so the attempt
        budget can end a run that provably never committed)."""

    @property
    def tenant_usage(self) -> TenantUsage:
        """Where :meth:`finish` counts each run's tokens and cost into its tenant's day, once
        per run (in the same round trip on Redis)."""

    def finish(self, result: RunResult, *, reply_to: str | None = None) -> str | None:
        """Record the result, pop the run from its session queue and announce its completion
        on the namespace feed and, when given, on producer ``reply_to``'s own feed; the run id
        now at the head of the session's queue (None: empty), so the drain needs no read. A
        result with tokens is counted into :attr:`tenant_usage` (once per run id)."""

    def finish_and_release(
        self,
        result: RunResult,
        lease: Lease,
        *,
        reply_to: str | None = None,
        expect_idle: bool = False,
    ) -> tuple[str | None, IdleRelease | None]:
        """:meth:`finish`, then, when that left the queue empty, :meth:`release_if_idle` in the
        same step: ``(next head, None)`` while runs are queued, else ``(None, what the release
        did)``. The drain's last run costs one round trip instead of two.

        ``expect_idle``: a hint that the queue holds only this run (a backend may then do the
        session's exit from the active index in the same round trip); never changes the result.
        """

    def note_waiting(self, ref: RunRef, what: str | None) -> None:
        """Show that the running run waits for ``what`` (e.g. ``"model budget"``), or no longer
        (None), in its record and in the namespace's index of waiting runs."""

    def waiting_runs(self) -> list[tuple[RunRef, str]]:
        """The runs that wait now, and for what (oldest first)."""

    def drop(self, tenant: str, session_id: str, run_id: str) -> None:
        """Remove a run id from the session queue (an orphan without a record)."""

    def release_if_idle(self, lease: Lease) -> IdleRelease:
        """Release the lease only when the session queue is empty."""


class Cancellation(Protocol):
    """Cooperative cancel: a flag the running attempt checks at its step boundaries."""

    def request_cancel(self, ref: RunRef) -> CancelOutcome:
        """Ask the run to stop (see :class:`CancelOutcome`)."""

    def cancel_requested(self, ref: RunRef) -> bool:
        """True when someone asked the run to stop."""

    def stop_mode(self, ref: RunRef) -> StopMode | None:
        """How the run was asked to stop, or None."""

    def preempt(self, tenant: str, session_id: str, run_id: str, mode: StopMode) -> str | None:
        """Ask the session's running run (the queue's head, when it is not ``run_id`` and has
        started) to stop in ``mode``; its run id, or None when no other run is running."""


class IdleSession(NamedTuple):
    """An active session without progress, and for how long."""

    tenant: str
    session_id: str
    idle_ms: int


class Recovery(Protocol):
    """Finding sessions whose worker died with runs queued."""

    def pending_count(self, tenant: str, session_id: str) -> int:
        """How many runs are queued for the session."""

    def idle_sessions(self, idle_ms: int, limit: int = 100) -> list[IdleSession]:
        """Active sessions (a worker claimed or began a run there, and their queue has not been
        empty since) without progress for ``idle_ms`` (oldest first), with how long each has
        been idle: a sweep that looks for two ages reads the index once."""

    def unclaimed_sessions(self, idle_ms: int, limit: int = 100) -> list[tuple[str, str]]:
        """Sessions a producer queued a run on ``idle_ms`` ago or more, whose queue has not been
        empty since (oldest first): where a run whose message was lost waits. Read from the
        tenants' own queued indexes, which workers read but no other tenant does."""

    def claim_kick(self, tenant: str, session_id: str, ttl_ms: int) -> bool:
        """Claim the right to re-enqueue the session for ``ttl_ms`` (one sweeper wins) and
        record progress on it; False when another sweeper claimed it."""

    def forget_if_idle(self, tenant: str, session_id: str) -> None:
        """Drop the session from the active set when it has no queue and no lease."""


class Completion(NamedTuple):
    """One entry of a completion feed."""

    position: bytes
    ref: RunRef
    result: RunResult | None
    """The run's result when the entry carries it (else read it from the record)."""


class Completions(Protocol):
    """The feeds of finished runs: one per producer (``feed`` = its id: the runs it submitted)
    for its listener, and the namespace's (``feed`` None: every run) for observers.

    A feed may have several shards (a session's runs always in the same one): a reader of one
    ``shard`` gets that shard's positions, a reader of the whole feed (``shard`` None) one
    position for all of them. Positions are opaque: pass back what was read."""

    def feed_shards(self, feed: str | None = None) -> int:
        """How many shards ``feed`` has (1: none)."""

    def feed_readers(self, feed: str | None = None) -> list[int | None]:
        """The shards each blocking reader of ``feed`` reads (``[None]``: one reader of the
        whole feed; a cluster, where one command names one slot, needs one per shard)."""

    def done_last_id(self, feed: str | None = None, shard: int | None = None) -> bytes:
        """The position of the newest completion of ``feed``'s ``shard`` (of the whole feed when
        None; ``0-0`` when none)."""

    def read_done(
        self, after_id: bytes, block_ms: int, feed: str | None = None, shard: int | None = None
    ) -> list[tuple[bytes, RunRef]]:
        """``(position, run)`` of ``feed``'s completions after ``after_id`` (blocks up to
        ``block_ms``), in ``shard`` (every shard when None)."""

    def read_completions(
        self, after_id: bytes, block_ms: int, feed: str | None = None, shard: int | None = None
    ) -> list[Completion]:
        """:meth:`read_done`, with the result of each run whose feed entry carries it (a
        producer's feed carries small results: its listener then needs no read of the record)."""

    def close_feed(self, feed: str) -> None:
        """Drop a producer's feed (the producer is closing)."""


class RunQueue(Submissions, SessionQueue, Cancellation, Recovery, Completions, Protocol):
    """Everything distributed runs keep outside the session store, as one seam."""


def preempt_for(queue: Cancellation, request: RunRequest) -> str | None:
    """Apply ``request``'s multitask strategy to the session's running run, once it is queued:
    ``interrupt`` and ``rollback`` ask it to stop at its next step boundary."""
    modes = {BusyPolicy.INTERRUPT: StopMode.INTERRUPT, BusyPolicy.ROLLBACK: StopMode.CANCEL}
    mode = modes.get(request.on_busy)
    if mode is None:
        return None
    return queue.preempt(request.tenant, request.session_id, request.run_id, mode)


def submit(queue: Submissions, request: RunRequest, *, on: str | None = None) -> SubmitOutcome:
    """Submit one request (see :meth:`Submissions.submit_many`)."""
    return queue.submit_many([request], queue=on)[0]
