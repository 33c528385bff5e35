"""What a drain does with the run at the head of its session's queue: drop it (no record, or
one that names another run), finish it as found (a result recorded before a crash popped it,
cancelled while queued, an agent nobody knows), leave it for later (a retry back-off, another
queue's agent), or attempt it (:mod:`tether.worker.engine.attempt`), and what a failed attempt
leaves: the :class:`Outcome` the drain loop goes on with.
"""

from __future__ import annotations

import logging
from enum import Enum

from tether.core.events import now_ms
from tether.core.results import RunStatus
from tether.errors import (
    ConflictError,
    InfrastructureError,
    RunHandedBack,
    TetherError,
    UnknownAgent,
    VersionConflict,
)
from tether.observability import metrics
from tether.observability.tracing import run_span
from tether.runs.contract import RunRef, RunRequest, RunResult
from tether.runs.queue.base import RunView
from tether.runs.usage.policy import budget_of
from tether.runtime.agent import Agent
from tether.worker.engine.admission import applicable
from tether.worker.engine.attempt import RunUnreadable, attempt
from tether.worker.engine.claim import Claim
from tether.worker.engine.drain_state import DrainState

log = logging.getLogger(__name__)


class Outcome(Enum):
    """How applying one queued run ended."""

    DONE = "done"
    ABORT = "abort"
    HANDOVER = "handover"
    AGAIN = "again"
    """The attempt lost its compare-and-set: start the run again from the store, now."""


def apply_one(d: DrainState, run_id: str) -> Outcome:
    """Apply the queued run ``run_id`` (the head of the session's queue)."""
    services = d.services
    ref = RunRef(d.lease.tenant, d.lease.session_id, run_id)
    claim = d.take_claim(run_id)
    view = claim.view if claim is not None else services.runs.get(ref)
    if not applicable(ref, view):
        services.runs.drop(d.lease.tenant, d.lease.session_id, run_id)
        return Outcome.DONE
    assert view is not None and view.request is not None
    request = view.request
    d.begin_run(request)
    if view.result is not None:  # finished before a crash popped it
        d.commit(run_id, request.reply_to).finish(view.result)
        return Outcome.DONE
    if view.retry_at_ms > now_ms():
        # an infrastructure failure a moment ago: let the sweeper retry after the backoff rather
        # than burn every attempt in a burst of drains (one per queued message of the session)
        return Outcome.ABORT
    try:
        agent = services.registry.get(request.agent)
    except UnknownAgent as exc:
        return _unknown_agent(d, view, request, claim, exc)
    if claim is not None and (claim.begun or claim.cancelled):
        attempts = claim.attempts  # the claim began it (or found it cancelled) already
    else:
        attempts = services.runs.begin(ref, services.worker_id)
    if attempts is None:  # cancelled while queued: it never starts
        cancelled = RunResult.failure(
            request, RunStatus.CANCELLED, "RunCancelled", "cancelled before it started"
        )
        d.commit(run_id, request.reply_to).finish(cancelled)
        return Outcome.DONE
    if _over_rate(d, request):
        return Outcome.ABORT
    if _leaves_to_others(d, request, agent):
        return Outcome.HANDOVER
    return _attempted(d, view, request, agent, attempts)


def _leaves_to_others(d: DrainState, request: RunRequest, agent: Agent) -> bool:
    """Put the begun run back, unstarted and uncounted, when another tenant is owed the next
    turn of its model's shared limit and its own tenant already has a call waiting for it
    (:mod:`tether.worker.engine.turns`): the worker goes on to its next message, which may
    be the owed tenant's run. The hand-over wakes the session behind its queue's messages."""
    turns = d.services.model_turns
    if turns is None or not turns.leave(request.tenant, request.session_id, agent.model_name):
        return False
    log.info(
        "run %s put back in its queue: another tenant is owed the next turn of model %r, and "
        "tenant %r already has a call waiting for it",
        request.run_id, agent.model_name, request.tenant,
    )  # fmt: skip
    d.services.runs.hand_back(request.ref)
    metrics.run_deferred("model_share")
    return True


def _over_rate(d: DrainState, request: RunRequest) -> bool:
    """Put the begun run back, unstarted and uncounted, when its tenant's ``runs_per_minute``
    has no room for it now; the sweeper starts it once its back-off passed. The worker takes
    the rate (a tenant cannot write it: a producer only checks it), so a producer that skips
    its check, or many racing ones, cannot start runs faster than the budget allows."""
    services = d.services
    budget = budget_of(services.settings, request.tenant)
    if budget is None or not budget.runs_per_minute:
        return False
    verdict = services.runs.tenant_usage.take_rate(request.tenant, budget, request.run_id)
    if verdict.admitted:
        return False
    wait_ms = max(1, int(verdict.retry_after_s * 1000))
    log.info(
        "run %s deferred %d ms: tenant %r is at its runs_per_minute=%g",
        request.run_id, wait_ms, request.tenant, budget.runs_per_minute,
    )  # fmt: skip
    services.runs.hand_back(request.ref)
    services.runs.note_failure(
        request.ref,
        f"deferred: tenant {request.tenant!r} is at its budget runs_per_minute="
        f"{budget.runs_per_minute:g}; it starts in {wait_ms / 1000:.1f} s",
        retry_after_ms=wait_ms,
    )
    metrics.run_deferred("runs_per_minute")
    return True


def _unknown_agent(
    d: DrainState, view: RunView, request: RunRequest, claim: Claim | None, exc: UnknownAgent
) -> Outcome:
    """A run for an agent this worker does not know: hand the session to the queue it was
    submitted to (whose workers know it), else fail the run."""
    services, ref = d.services, request.ref
    if view.queue and view.queue != services.settings.queue:
        log.info("run %s is for queue %s; handing the session over", ref.run_id, view.queue)
        if claim is not None and claim.begun:
            services.runs.hand_back(ref)  # the claim began it; those workers start it afresh
        return Outcome.HANDOVER
    failed = RunResult.failure(request, RunStatus.FAILED, exc.error_type, str(exc))
    d.commit(ref.run_id, request.reply_to).finish(failed)
    return Outcome.DONE


def _attempted(
    d: DrainState, view: RunView, request: RunRequest, agent: Agent, attempts: int
) -> Outcome:
    """Attempt the run; what the drain does next when the attempt failed."""
    ref = request.ref  # the queued run's: applicable() checked that the request names it
    try:
        with run_span(request, attempts):
            attempt(d, view, request, agent, attempts)
        return Outcome.DONE
    except RunHandedBack:
        log.info(
            "run %s handed back at its last checkpoint: this worker is shutting down", ref.run_id
        )
        d.forget_session()
        d.services.runs.hand_back(ref)  # no failure: the attempt does not count
        return Outcome.HANDOVER
    except RunUnreadable as unreadable:
        _abandon(d, ref, attempts, unreadable.cause, before_commit=True)
        return Outcome.ABORT
    except (InfrastructureError, ConflictError) as exc:
        if _finished(d, ref.run_id):
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
    d.forget_session()


def _abandon(
    d: DrainState, ref: RunRef, attempts: int, exc: TetherError, *, before_commit: bool = False
) -> None:
    """Forget the held session (it may be stale) and note why the attempt failed."""
    log.warning("run %s attempt %d aborted, will retry: %s", ref.run_id, attempts, exc)
    metrics.attempt_aborted(exc)
    d.forget_session()
    services = d.services
    backoff_ms = services.settings.lease_ttl_ms if isinstance(exc, InfrastructureError) else 0
    try:
        services.runs.note_failure(
            ref, f"{exc.error_type}: {exc}", retry_after_ms=backoff_ms, before_commit=before_commit
        )
    except TetherError as note_exc:  # Redis away too: the attempt is retried regardless
        log.warning("could not record the failure of run %s: %s", ref.run_id, note_exc)
