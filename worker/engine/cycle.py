"""The drain: the restore → run → save cycle, applied to one session's queue under its lease.

:func:`claim_session` takes the session lease (fencing token included) in the drain's first
round trip, registering the request its message carries; :func:`drain_claimed` then applies the
session's queued runs in order (:func:`drain` does both). For each run
(:mod:`tether.worker.engine.queued_run`) it loads the snapshot head (once per lease; later runs
reuse the session it already holds, :mod:`tether.worker.engine.restore`), finishes a request id
the head already applied without running it again, runs the agent while publishing events to
the stream (fenced, :mod:`tether.worker.engine.execution`), then commits in the named steps of
:mod:`tether.worker.engine.commit` (:mod:`tether.worker.engine.attempt`). Any failure before the
head write leaves the run queued for another attempt; a zombie worker (lease lost) fails the
head's compare-and-set and the stream's fence, so it cannot overwrite newer state: a holder that
took the lease over from an expired grant first rewrites the head under its own fence
(:mod:`tether.worker.engine.fencing`).

This module owns the loop over the queue: when it stops (the queue is empty and the lease
released, the lease lost, a run aborted, its time budget spent, the worker shutting down), the
hand-over to a fresh drain, and the announcement of each finished run. The cycle takes only
seams (:class:`~tether.worker.engine.services.EngineServices`): it runs the same in a Celery
worker and in-process in tests. What one drain holds between its runs is
:class:`~tether.worker.engine.drain_state.DrainState`.
"""

from __future__ import annotations

import logging
import time

from tether.errors import TetherError
from tether.observability import metrics
from tether.persistence.streams.base import CompactingStream
from tether.runs.queue.base import IdleRelease
from tether.worker.engine.claim import Carried, Claim
from tether.worker.engine.commit import CommitTarget
from tether.worker.engine.drain_state import DrainState
from tether.worker.engine.lease_keeper import LeaseKeeper
from tether.worker.engine.queued_run import Outcome, apply_one
from tether.worker.engine.services import EngineServices

log = logging.getLogger(__name__)

#: Stop taking new runs from one session after this long, so one busy session cannot hold a
#: worker forever; the rest of its queue is handed to a fresh drain task.
DRAIN_BUDGET_S = 30.0


def drain(
    services: EngineServices, tenant: str, session_id: str, *, carried: Carried | None = None
) -> int:
    """Apply the session's queued runs; return how many were finished (0 when the lease is busy).

    ``carried``: the request of the message that asked for this drain, registered (idempotently)
    in the same round trip that takes the lease (to act on how that went, call
    :func:`claim_session` and :func:`drain_claimed` instead).
    """
    return drain_claimed(services, claim_session(services, tenant, session_id, carried=carried))


def claim_session(
    services: EngineServices,
    tenant: str,
    session_id: str,
    *,
    carried: Carried | None = None,
    expect: str | None = None,
) -> Claim:
    """The drain's first round trip: register ``carried``, take the session's lease and begin
    the head run of its queue (:mod:`tether.worker.engine.claim`); with ``expect``, only when
    the session holds a record of that run (a registered-only wake-up)."""
    return services.claims().claim(
        tenant,
        session_id,
        owner=services.worker_id,
        ttl_ms=services.settings.lease_ttl_ms,
        carried=carried,
        expect=expect,
    )


def drain_claimed(services: EngineServices, claim: Claim) -> int:
    """Apply the queued runs of the session ``claim`` took the lease of; return how many were
    finished (0 when it took no lease)."""
    lease = claim.lease
    if lease is None:
        return 0
    metrics.lease_granted(lease.takeover)
    keeper = LeaseKeeper(services.leases, lease, services.settings.lease_ttl_ms).start()
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
            _release(d)
    if hand_over:  # only once the lease is free, or the next drain would find it held
        services.wake(lease.tenant, lease.session_id)
    elif released:
        _at_rest(services, lease.tenant, lease.session_id)
    return d.processed


def _at_rest(services: EngineServices, tenant: str, session_id: str) -> None:
    """The session's queue is empty and its lease free: its live stream gives back the room
    Redis keeps for appends (a parked or finished session may wait hours for its next run;
    docs/capacity.md). After the results went out, so no run waits for it; never failing."""
    if not isinstance(services.stream, CompactingStream):
        return
    try:
        services.stream.compact(tenant, session_id)
    except TetherError as exc:  # the stream is only bigger than it needs to be
        log.warning("could not compact the stream of %s/%s: %s", tenant, session_id, exc)


def _release(d: DrainState) -> None:
    """Free the lease of a drain that did not leave its session idle."""
    services, lease = d.services, d.lease
    try:
        # this drain may have written the head without caching it: the next holder
        # reads the store (when the drop fails the lease is kept, and expires into a
        # takeover, which reads the store too)
        if services.head_cache is not None:
            services.head_cache.drop(lease.tenant, lease.session_id)
        services.leases.release(lease)
    except TetherError as exc:  # it expires by itself; recovery does not depend on this
        log.warning("could not release lease of %s/%s: %s", lease.tenant, lease.session_id, exc)


def _drain_queue(d: DrainState) -> tuple[bool, bool]:
    """Apply queued runs until the queue is empty; return (lease released, hand over)."""
    started = time.monotonic()
    redone: set[str] = set()
    while not d.keeper.lost:
        run_id = d.next_run()
        if run_id is None:
            if d.commit(None).release(d.release_if_idle) != IdleRelease.BUSY:
                return True, False  # released, or lost: either way not ours to release
            continue
        if time.monotonic() - started > DRAIN_BUDGET_S or d.services.draining():
            d.undo_claim()  # its attempt does not count: the next holder starts it
            return False, True
        outcome = apply_one(d, run_id)
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
    commit, request, notify = d.last_commit, d.applied, d.services.on_finished
    if notify is None or commit is None or commit.result is None or request is None:
        return
    try:
        notify(request, commit.result)
    except Exception:  # an announcement must never fail the session's next runs
        log.exception("announcing run %s failed", commit.result.run_id)
