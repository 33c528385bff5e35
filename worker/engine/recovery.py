"""Crash recovery faster than the broker's: find sessions whose worker died, and wake them.

A worker that dies mid-run leaves its run (marked RUNNING) at the head of the session queue and
its lease to expire. The broker would redeliver the message only after its visibility timeout
(minutes); instead every worker's main process calls :func:`sweep_once` periodically, which
finds active sessions without progress for a lease TTL, no lease holder and queued runs, and
wakes them (a drain task). A short per-session claim keeps several sweepers from waking the same
session at once.
"""

from __future__ import annotations

import logging

from tether.errors import ConfigurationError, StreamUnavailable, TetherError
from tether.observability.metrics import session_recovered
from tether.runs.contract import RunRef
from tether.runs.queue.base import RunState
from tether.worker.engine.services import EngineServices

log = logging.getLogger(__name__)

#: A session whose next run never started is woken only after this many lease TTLs: under a
#: backlog its own message is on the way, and waking it would flood the queue with drains.
#: A run a dead worker had started (status RUNNING), or any run of a session whose lease expired
#: unreleased (its holder died between two runs), is woken after one TTL.
BACKLOG_PATIENCE = 5

#: Errors that fail every session alike: the pass ends rather than logging each.
_PASS_ENDING = (StreamUnavailable, ConfigurationError)


def sweep_once(services: EngineServices, *, unclaimed: bool = True) -> int:
    """One pass; returns how many sessions were woken. ``unclaimed``: also read the tenants'
    queued indexes for sessions no worker claimed (the sweeper thread does it every
    :func:`unclaimed_every_s`, not every pass: their cost grows with the tenants).

    A session that fails (a record or key that does not read) is logged and skipped, so one
    bad session never stops the recovery of the others; Redis being unreachable or refusing
    the worker's credential ends the pass (the next one tries again).
    """
    settings = services.settings
    woken = 0
    patience_ms = BACKLOG_PATIENCE * settings.lease_ttl_ms
    # one read of the active index for both ages (each read is one command per shard, 64, at
    # every pass of every worker, busy or idle)
    stale = services.runs.idle_sessions(idle_ms=settings.lease_ttl_ms)
    long_idle = {(s.tenant, s.session_id) for s in stale if s.idle_ms >= patience_ms}
    # sessions no worker claimed (a lost message): only ever woken after the patience, so
    # their tenants' queued indexes are read then, not every pass
    if unclaimed:
        long_idle.update(services.runs.unclaimed_sessions(idle_ms=patience_ms))
    candidates = dict.fromkeys((s.tenant, s.session_id) for s in stale)
    candidates.update(dict.fromkeys(long_idle))
    for tenant, session_id in candidates:
        try:
            woken += _recover(services, tenant, session_id, (tenant, session_id) in long_idle)
        except _PASS_ENDING:
            raise
        except Exception as exc:  # any other failure is that one session's
            log.warning(
                "sweeper skipped %s/%s this pass (%s: %s); its lost runs wait for the broker's "
                "redelivery until it reads again",
                tenant,
                session_id,
                type(exc).__name__,
                exc,
                exc_info=not isinstance(exc, TetherError),  # an unexpected one: the traceback
            )
    return woken


def unclaimed_every_s(services: EngineServices) -> float:
    """How often the sweeper reads the tenants' queued indexes: twice per backlog patience, the
    least a never-claimed session waits before it is woken."""
    return BACKLOG_PATIENCE * services.settings.lease_ttl_ms / 2000


def _recover(services: EngineServices, tenant: str, session_id: str, long_idle: bool) -> bool:
    """Wake the session when its worker died with runs queued; True when it was woken."""
    ttl_ms = services.settings.lease_ttl_ms
    if services.leases.holder(tenant, session_id) is not None:
        return False
    head = services.runs.head(tenant, session_id)
    if head is None:
        services.runs.forget_if_idle(tenant, session_id)
        return False
    view = services.runs.get(RunRef(tenant, session_id, head))
    never_started = view is not None and view.status == RunState.QUEUED
    # a holder that died between two queued runs had taken the next run's message along
    # with the session: nothing else will wake it, so do not wait for the backlog patience
    died_holding = services.leases.abandoned(tenant, session_id)
    if never_started and not died_holding and not long_idle:
        # most likely its message is still waiting in a busy queue, not lost
        return False
    if not services.runs.claim_kick(tenant, session_id, ttl_ms):
        return False
    services.wake(tenant, session_id)
    session_recovered()
    log.info("sweeper re-enqueued %s/%s (lease expired with queued runs)", tenant, session_id)
    return True
