"""The restore → run → save cycle, applied to one session's queue under its lease.

:func:`drain` takes the session lease (fencing token included), then applies the session's
queued runs in order. For each run it loads the snapshot head (once per lease; later runs reuse
the session it already holds), finishes a request id the head already applied without running it
again, runs the agent while publishing events to the stream (fenced), then commits in the named
steps of :mod:`tether.worker.engine.commit`. Any failure before the head write leaves the run
queued for another attempt; a zombie worker (lease lost) fails the head's compare-and-set and
the stream's fence, so it cannot overwrite newer state: a holder that took the lease over from
an expired grant first rewrites the head under its own fence (:mod:`tether.worker.engine.fencing`).

The cycle takes only seams (:class:`~tether.worker.engine.services.EngineServices`): it runs the
same in a Celery worker and in-process in tests. What one drain holds between its runs is
:class:`~tether.worker.engine.drain_state.DrainState`; what the loop asks at each step boundary
is :class:`~tether.worker.engine.stops.RunStops`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from enum import Enum

from tether.core.events import EventType, now_ms
from tether.core.results import RunStatus
from tether.core.snapshot import MAX_APPLIED_RECORDS, RunRecord
from tether.errors import (
    BudgetExceeded,
    ConflictError,
    DataError,
    InfrastructureError,
    InvalidInput,
    RunCancelled,
    RunHandedBack,
    RunInterrupted,
    TetherError,
    UnknownAgent,
    VersionConflict,
)
from tether.observability import metrics
from tether.observability.tracing import run_span, span
from tether.runs.contract import RunRef, RunRequest, RunResult
from tether.runs.limits.gate import budget_waits
from tether.runs.queue.base import IdleRelease, RunView, SubmitOutcome
from tether.runs.usage.base import has_tokens
from tether.runs.usage.policy import prices
from tether.runtime.agent import Agent
from tether.runtime.approvals import check_resolutions
from tether.runtime.session import AgentSession
from tether.worker.engine.admission import applicable
from tether.worker.engine.claim import Carried
from tether.worker.engine.commit import CommitTarget
from tether.worker.engine.deltas import RunDeltaStream
from tether.worker.engine.drain_state import DrainState
from tether.worker.engine.fencing import load_head
from tether.worker.engine.lease_keeper import LeaseKeeper
from tether.worker.engine.records import (
    applied_record,
    interrupted_record,
    redacted,
    redacted_pending,
    result_from_record,
    retries_exhausted,
    rolled_back_record,
)
from tether.worker.engine.resume import ASK, Checkpointer, resume_point
from tether.worker.engine.services import EngineServices
from tether.worker.engine.spend import committed, priced, run_steps, run_usage, spend_check
from tether.worker.engine.stops import RunStops
from tether.worker.engine.waits import WaitNotice

log = logging.getLogger(__name__)

#: Stop taking new runs from one session after this long, so one busy session cannot hold a
#: worker forever; the rest of its queue is handed to a fresh drain task.
DRAIN_BUDGET_S = 30.0


class Outcome(Enum):
    """How applying one queued run ended."""

    DONE = "done"
    ABORT = "abort"
    HANDOVER = "handover"
    AGAIN = "again"
    """The attempt lost its compare-and-set: start the run again from the store, now."""


def drain(
    services: EngineServices,
    tenant: str,
    session_id: str,
    *,
    carried: Carried | None = None,
    on_submitted: Callable[[SubmitOutcome], None] | None = None,
) -> int:
    """Apply the session's queued runs; return how many were finished (0 when the lease is busy).

    ``carried``: the request of the message that asked for this drain, registered (idempotently)
    in the same round trip that takes the lease; ``on_submitted`` hears how that went.
    """
    ttl_ms = services.settings.lease_ttl_ms
    claim = services.claims().claim(
        tenant, session_id, owner=services.worker_id, ttl_ms=ttl_ms, carried=carried
    )
    if claim.submitted is not None and on_submitted is not None:
        on_submitted(claim.submitted)
    lease = claim.lease
    if lease is None:
        return 0
    metrics.lease_granted(lease.takeover)
    keeper = LeaseKeeper(services.leases, lease, ttl_ms).start()
    target = CommitTarget(
        services.store,
        services.archive,
        services.archive_hint,
        services.runs,
        services.worker_id,
        services.checkpoints,
        services.archive_batch_events,
    )
    d = DrainState(services, lease, keeper, target, claimed=claim)
    released = hand_over = False
    try:
        released, hand_over = _drain_queue(d)
    finally:
        keeper.stop()
        services.guard.clear(lease)
        if not released:
            try:
                # this drain may have written the head without caching it: the next holder
                # reads the store (when the drop fails the lease is kept, and expires into a
                # takeover, which reads the store too)
                if services.head_cache is not None:
                    services.head_cache.drop(tenant, session_id)
                services.leases.release(lease)
            except TetherError as exc:  # it expires by itself; recovery does not depend on this
                log.warning("could not release lease of %s/%s: %s", tenant, session_id, exc)
    if hand_over:  # only once the lease is free, or the next drain would find it held
        services.wake(tenant, session_id)
    return d.processed


def _drain_queue(d: DrainState) -> tuple[bool, bool]:
    """Apply queued runs until the queue is empty; return (lease released, hand over)."""
    services = d.services
    started = time.monotonic()
    redone: set[str] = set()
    while not d.keeper.lost:
        run_id = d.next_run()
        if run_id is None:
            if d.commit(None).release(d.release_if_idle) != IdleRelease.BUSY:
                return True, False  # released, or lost: either way not ours to release
            continue
        if time.monotonic() - started > DRAIN_BUDGET_S or services.draining():
            d.undo_claim()  # its attempt does not count: the next holder starts it
            return False, True
        outcome = _apply_one(d, run_id)
        if outcome is Outcome.AGAIN and run_id not in redone:
            redone.add(run_id)  # once: a second conflict in a row is left to the sweeper
            continue
        if outcome is not Outcome.DONE:
            return False, outcome is Outcome.HANDOVER
        d.processed += 1
        _announce(d)
    return False, False


def _announce(d: DrainState) -> None:
    """Tell :attr:`EngineServices.on_finished` (webhooks) about the run just finished: after its
    result is committed, and never failing the drain."""
    commit, request = d.last_commit, d.applied
    if d.services.on_finished is None or commit is None or commit.result is None or request is None:
        return
    try:
        d.services.on_finished(request, commit.result)
    except Exception:  # an announcement must never fail the session's next runs
        log.exception("announcing run %s failed", commit.result.run_id)


def _apply_one(d: DrainState, run_id: str) -> Outcome:
    services = d.services
    ref = RunRef(d.lease.tenant, d.lease.session_id, run_id)
    claim = d.take_claim(run_id)
    view = claim.view if claim is not None else services.runs.get(ref)
    if not applicable(ref, view):
        services.runs.drop(d.lease.tenant, d.lease.session_id, run_id)
        return Outcome.DONE
    assert view is not None and view.request is not None
    d.applied = view.request
    reply_to = view.request.reply_to
    if view.result is not None:  # finished before a crash popped it
        d.commit(run_id, reply_to).finish(view.result)
        return Outcome.DONE
    request = view.request
    if view.retry_at_ms > now_ms():
        # an infrastructure failure a moment ago: let the sweeper retry after the backoff rather
        # than burn every attempt in a burst of drains (one per queued message of the session)
        return Outcome.ABORT
    try:
        agent = services.registry.get(request.agent)
    except UnknownAgent as exc:
        if view.queue and view.queue != services.settings.queue:
            # submitted to another queue, whose workers know this agent: hand the session over
            log.info("run %s is for queue %s; handing the session over", run_id, view.queue)
            if claim is not None and claim.begun:
                services.runs.hand_back(ref)  # the claim began it; those workers start it afresh
            return Outcome.HANDOVER
        failed = RunResult.failure(request, RunStatus.FAILED, exc.error_type, str(exc))
        d.commit(run_id, reply_to).finish(failed)
        return Outcome.DONE
    if claim is not None and (claim.begun or claim.cancelled):
        attempts = claim.attempts  # the claim began it (or found it cancelled) already
    else:
        attempts = services.runs.begin(ref, services.worker_id)
    if attempts is None:  # cancelled while queued: it never starts
        cancelled = RunResult.failure(
            request, RunStatus.CANCELLED, "RunCancelled", "cancelled before it started"
        )
        d.commit(run_id, reply_to).finish(cancelled)
        return Outcome.DONE
    try:
        with run_span(request, attempts):
            return _attempt(d, view, request, agent, attempts)
    except RunHandedBack:
        log.info("run %s handed back at its last checkpoint: this worker is shutting down", run_id)
        d.session, d.loaded = None, False
        services.runs.hand_back(ref)  # no failure: the attempt does not count
        return Outcome.HANDOVER
    except RunUnreadable as unreadable:
        _abandon(d, ref, attempts, unreadable.cause, before_commit=True)
        return Outcome.ABORT
    except (InfrastructureError, ConflictError) as exc:
        if _finished(d, run_id):
            _failed_after_commit(d, ref, exc)
            return Outcome.DONE
        _abandon(d, ref, attempts, exc)
        # a lost compare-and-set: the head it started from was not the newest (a cached head
        # that a write outside the lease made stale); the store (which save() just made the
        # cache drop) has the truth and this drain still holds the lease: go again now
        return Outcome.AGAIN if isinstance(exc, VersionConflict) else Outcome.ABORT


def _finished(d: DrainState, run_id: str) -> bool:
    """True when this drain's commit of ``run_id`` passed its commit point and its finish."""
    commit = d.last_commit
    return commit is not None and commit.finished and commit.run_id == run_id


def _failed_after_commit(d: DrainState, ref: RunRef, exc: TetherError) -> None:
    """A step after ``finish`` failed (the archive segment, its hint): the run is committed and
    its result recorded, so nothing is retried; the held session is dropped (the head, which
    keeps the events not archived, is read again by the next run)."""
    log.error(
        "run %s is committed and finished, but a step after its commit failed (not retried): "
        "%s. When an archive segment already holds different events, the session's head was "
        "restored without its archive (or the archive belongs to another history): the head "
        "stays the truth of the session's memory; restore the archive taken with that head, "
        "or move aside the segments newer than it",
        ref.run_id, str(exc).rstrip("."),
    )  # fmt: skip
    d.session, d.loaded = None, False


class RunUnreadable(Exception):
    """The attempt could not read the session's head: it wrote nothing."""

    def __init__(self, cause: InfrastructureError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _abandon(
    d: DrainState, ref: RunRef, attempts: int, exc: TetherError, *, before_commit: bool = False
) -> None:
    """Forget the held session (it may be stale) and note why the attempt failed."""
    log.warning("run %s attempt %d aborted, will retry: %s", ref.run_id, attempts, exc)
    metrics.attempt_aborted(exc)
    d.session = None
    d.loaded = False
    backoff_ms = d.services.settings.lease_ttl_ms if isinstance(exc, InfrastructureError) else 0
    try:
        d.services.runs.note_failure(
            ref, f"{exc.error_type}: {exc}", retry_after_ms=backoff_ms, before_commit=before_commit
        )
    except TetherError as note_exc:  # Redis away too: the attempt is retried regardless
        log.warning("could not record the failure of run %s: %s", ref.run_id, note_exc)


def _attempt(
    d: DrainState, view: RunView, request: RunRequest, agent: Agent, attempts: int
) -> Outcome:
    commit = d.commit(request.run_id, request.reply_to)
    budget_spent = attempts > d.services.settings.max_attempts
    try:
        session = _session_for(d, request, agent)
    except InfrastructureError as exc:
        if budget_spent and view.failed_before_commit >= attempts - 1:
            # every earlier attempt failed before it could write anything, so the run was never
            # applied: the budget may end it although the head cannot be read now
            commit.finish(retries_exhausted(request, attempts, view, exc))
            return Outcome.DONE
        raise RunUnreadable(exc) from exc
    except DataError as exc:
        # the stored head is unreadable (corrupt, or a schema version this build does not
        # know): retrying cannot help and writing would destroy it, so fail the run, touch nothing
        log.error("run %s failed: session head unreadable: %s", request.run_id, exc)
        failed = RunResult.failure(
            request, RunStatus.FAILED, exc.error_type, str(exc), attempts=attempts
        )
        commit.finish(failed)
        return Outcome.DONE
    # the head decides before the attempt budget does: a run that committed on its last
    # allowed attempt, then lost its worker before finishing, is finished as committed
    applied = session.find_applied(request.request_id)
    table = prices(d.services.settings)
    if applied is not None:
        # committed by an attempt that died before its finish: counted here, once
        done = result_from_record(request, applied, duplicate=True, attempts=attempts)
        done = priced(done, agent.model_name, table)
        commit.finish(done)
        committed(done, agent.model_name)
        return Outcome.DONE
    if budget_spent:
        commit.finish(retries_exhausted(request, attempts, view))
        return Outcome.DONE
    refused = _refused_settlement(d, session, request, attempts)
    if refused is not None:
        commit.finish(refused)
        return Outcome.DONE
    started_ms = now_ms()
    d.pending = ()
    record = _execute(d, session, request, agent)
    result = result_from_record(
        request,
        record,
        duplicate=False,
        attempts=attempts,
        queue_ms=max(0, started_ms - request.submitted_at_ms),
        run_ms=now_ms() - started_ms,
        worker=d.services.worker_id,
    ).model_copy(update={"pending": d.pending})
    result = priced(result, agent.model_name, table)
    checkpointed = d.checkpointer is not None and d.checkpointer.saved
    with span("tether.commit", run_id=request.run_id):
        commit.run(session, d.publisher, lambda: d.keeper.lost, result, checkpointed=checkpointed)
    committed(result, agent.model_name)
    return Outcome.DONE


def _refused_settlement(
    d: DrainState, session: AgentSession, request: RunRequest, attempts: int
) -> RunResult | None:
    """The failure of a continuation that settles no pending call (before it writes anything:
    no session is saved, no event published), else None."""
    if not request.resolutions or d.resumed is not None:  # a resumed run settled them already
        return None
    try:
        check_resolutions(session, request.resolutions)
    except InvalidInput as exc:
        log.warning("run %s refused: %s", request.run_id, exc)
        if d.announce is not None:  # restored for this run alone: forget it, unannounced
            d.session, d.loaded, d.announce = None, False, None
        return RunResult.failure(
            request, RunStatus.FAILED, exc.error_type, str(exc), attempts=attempts
        )
    return None


def _execute(d: DrainState, session: AgentSession, request: RunRequest, agent: Agent) -> RunRecord:
    """Run (or resume) the agent on ``session``; the record of how it ended, applied to it."""
    resumed, d.resumed = d.resumed, None
    if d.announce is not None:
        d.publisher(d.announce)
        d.announce = None
    first_seq = resumed.progress.first_seq if resumed else session.last_seq + 1
    before = resumed.before if resumed else (session.memory_snapshot(), session.last_compact)
    for key, value in request.metadata.items():
        session.put_metadata(key, value)
    durability = request.durability or agent.options.durability
    checkpointer = (
        Checkpointer(d.services, d.lease, d.publisher, session, request.run_id, d.base_seq)
        if durability == "step"
        else None
    )
    d.checkpointer = checkpointer

    begun_by_claim = d.applying is not None and d.applying.begun
    spend = spend_check(
        d.services.settings,
        d.services.runs.tenant_usage,
        request.tenant,
        agent.model_name,
        session,
        first_seq,
    )
    stops = RunStops(d, request, checkpointer, begun_by_claim and resumed is None, spend)
    timeout_s = min(
        request.timeout_s or d.services.settings.max_run_s, d.services.settings.max_run_s
    )
    d.services.guard.watch(d.lease, request.run_id, time.time() + timeout_s)
    notice = WaitNotice(d.services.runs, request.ref, time.monotonic() + timeout_s)
    listening = budget_waits.set(notice)
    publisher = d.services.deltas
    deltas = None if publisher is None else RunDeltaStream(publisher, d.lease, request.run_id)
    try:
        if request.resolutions and resumed is None:  # a resumed run settled them before
            session.resolve(
                request.resolutions, run_id=request.run_id, request_id=request.request_id
            )
            # an approved tool has run: a rollback of what follows keeps its settlement, or the
            # call would be pending again and a second approval would run it again
            before = (session.memory_snapshot(), session.last_compact)
            if checkpointer is not None:  # a crash from here on resumes past it, never reruns it
                checkpointer()
        result = session.run(
            request.input,
            run_id=request.run_id,
            cancel_check=stops,
            timeout_s=timeout_s,
            checkpoint=checkpointer,
            resume=resumed.progress if resumed else None,
            on_delta=deltas,
            request_id=request.request_id,
        )
        record = applied_record(request, result, first_seq)
        d.pending = redacted_pending(result.pending, agent)
    except RunHandedBack:
        raise
    except BudgetExceeded as exc:  # at a step boundary: the finished steps stay
        record = interrupted_record(request, session, first_seq, exc, RunStatus.FAILED)
        record = record.model_copy(update={"steps": run_steps(session, first_seq)})
    except RunCancelled as exc:
        if stops.lost():
            raise ConflictError(f"lease or stream lost during run {request.run_id}") from exc
        if isinstance(exc, RunInterrupted):  # its finished steps stay: no rollback
            record = interrupted_record(request, session, first_seq, exc)
        else:
            record = rolled_back_record(
                session, request, before, first_seq, RunStatus.CANCELLED, exc
            )
    except (InfrastructureError, ConflictError):
        raise
    except Exception as exc:  # the agent failed: record it once, never retry
        record = rolled_back_record(session, request, before, first_seq, RunStatus.FAILED, exc)
    finally:
        budget_waits.reset(listening)
        notice.done()
    record = record.model_copy(update={"last_seq": session.last_seq, "finished_at_ms": now_ms()})
    if not has_tokens(record.usage):  # it ended early: its model calls were spent all the same
        record = record.model_copy(update={"usage": run_usage(session, first_seq)})
    record = redacted(record, agent)
    session.record_applied(record, keep=MAX_APPLIED_RECORDS)
    return record


def _adopt(d: DrainState, session: AgentSession, agent_name: str) -> AgentSession:
    """Make ``session`` the held one, publishing from now on (its restore event included)."""
    session.add_listener(d.publisher)
    if session.events and session.events[-1].type is EventType.SESSION_RESTORED:
        d.announce = session.events[-1]  # published when a run executes on it (_execute)
    d.session, d.agent_name = session, agent_name
    return session


def _session_for(d: DrainState, request: RunRequest, agent: Agent) -> AgentSession:
    """The session to run on: loaded once per lease (at the run's checkpoint, when it has
    one), then kept between runs; not a session replayed for a run that then did not execute
    (out of attempts): its steps were never committed, so the next run starts at the head."""
    if d.resumed is not None:
        d.loaded, d.resumed = False, None
    if not d.loaded:
        d.announce = None  # a restore of an abandoned attempt is never announced
        with span("tether.restore", session_id=request.session_id):
            stored = load_head(d.services, d.lease, agent, request, d.applying)
        d.loaded = True
        d.base_seq = stored.snapshot.last_seq if stored is not None else 0
        known = d.applying.checkpoint if d.applying is not None else ASK
        d.resumed = resume_point(d.services, agent, request, stored, checkpoint=known)
        if d.resumed is not None:
            session = d.resumed.session
            session.add_listener(d.publisher)  # replayed events were published when they happened
            d.session, d.agent_name = session, request.agent
            return session
        if stored is None:
            fresh = agent.new_session(request.session_id, tenant=request.tenant)
            return _adopt(d, fresh, request.agent)
        session = agent.session_from_snapshot(
            stored.snapshot, version=stored.version, by_reference=True, copy=False
        )
        session.mark_archived(stored.snapshot.archived_seq)
        return _adopt(d, session, request.agent)
    previous = d.session
    assert previous is not None
    d.base_seq = previous.last_seq
    if d.agent_name == request.agent:
        return previous
    session = agent.session_from_snapshot(
        previous.snapshot(), version=previous.version, by_reference=True
    )
    session.mark_archived(previous.archived_seq)
    return _adopt(d, session, request.agent)
