"""Fencing the session head when a lease is taken over from a holder that did not release it.

The head's compare-and-set checks only its version, and a holder can freeze (SIGSTOP, a GC or
swap pause, a slow S3 PUT inside botocore's retries) between its last lease check and its head
PUT. If the next holder then ran the same run from the same head, both PUTs would carry the same
expected version: the frozen one could land first and the taker's would be refused, leaving the
head with one attempt and the live stream with the other.

So a holder whose lease is a *takeover* (the previous grant expired unreleased, see
:class:`~tether.runs.leases.base.Lease`) first rewrites the head under its own fence, with
compare-and-set, before it relies on it. Either the frozen PUT landed first (then the taker's
rewrite conflicts, it reloads, and finds the run already applied), or it lands after (then its
expected version is gone and it is refused). Clean hand-overs, the common case, cost nothing: only
a takeover pays this one extra PUT; its claim drops the cached head before the taker reads (see
:mod:`tether.persistence.headcache`).
"""

from __future__ import annotations

import logging

from tether.core.snapshot import SessionSnapshot
from tether.errors import ConflictError, StoreUnavailable, TetherError, VersionConflict
from tether.persistence.stores.base import StoredSnapshot
from tether.runs.contract import RunRequest
from tether.runs.leases.base import Lease
from tether.runtime.agent import Agent
from tether.worker.engine.claim import Claim
from tether.worker.engine.services import EngineServices

log = logging.getLogger(__name__)

#: Each conflict means another writer committed in between; a frozen predecessor commits at
#: most once, so a few attempts suffice unless the lease itself was lost meanwhile.
FENCE_ATTEMPTS = 5


def load_head(
    services: EngineServices,
    lease: Lease,
    agent: Agent,
    request: RunRequest,
    claim: Claim | None = None,
) -> StoredSnapshot | None:
    """The committed head of ``request``'s session, fenced first when ``lease`` is a takeover.

    ``claim``: the claim that took ``lease``, when it read the head cache (then its entry is
    used and the cache is not read again).

    Raises:
        ConflictError: the head kept changing under the taker (its lease is likely lost too).
        StoreUnavailable: the read failed with an error that is not Tether's (a bug, or stored
            bytes a parser choked on), so that the attempt counts against the run's budget
            instead of escaping it: a run on such a head ends after ``TETHER_MAX_ATTEMPTS``
            rather than being retried forever.
    """
    try:
        return _load_head(services, lease, agent, request, claim)
    except TetherError:
        raise
    except Exception as exc:
        log.exception("reading the head of %s/%s failed", request.tenant, request.session_id)
        raise StoreUnavailable(
            f"reading the head of {request.tenant}/{request.session_id} failed unexpectedly "
            f"({type(exc).__name__}: {str(exc)[:200]}); the run is retried up to "
            "TETHER_MAX_ATTEMPTS times, then failed. Check the worker log for the traceback"
        ) from exc


def _load_head(
    services: EngineServices, lease: Lease, agent: Agent, request: RunRequest, claim: Claim | None
) -> StoredSnapshot | None:
    t, s = request.tenant, request.session_id
    if claim is not None and claim.cache_read:
        stored = services.store.load_known(t, s, claim.cached_head)  # a takeover's claim dropped it
    else:
        if lease.takeover and services.head_cache is not None:
            # the previous holder may have written the head and died before caching it
            services.head_cache.drop(t, s)
        stored = services.store.load(t, s)
    if not lease.takeover:
        return stored
    for _ in range(FENCE_ATTEMPTS):
        head = _fenced(services, lease, agent, request, stored)
        try:
            version = services.store.save(head, stored.version if stored is not None else None)
        except VersionConflict:
            stored = services.store.load(request.tenant, request.session_id)
            continue
        log.info(
            "lease of %s/%s taken over with fence %d: head fenced against the previous holder",
            lease.tenant,
            lease.session_id,
            lease.fence,
        )
        return StoredSnapshot(head, version)
    raise ConflictError(
        f"the head of {lease.tenant}/{lease.session_id} changed {FENCE_ATTEMPTS} times while "
        f"fencing it after a lease takeover; the run stays queued for the next lease holder"
    )


def _fenced(
    services: EngineServices,
    lease: Lease,
    agent: Agent,
    request: RunRequest,
    stored: StoredSnapshot | None,
) -> SessionSnapshot:
    """The head to write: the stored one under our fence, or an empty one when there is none
    (a frozen predecessor may be about to create the session)."""
    if stored is not None:
        return stored.snapshot.model_copy(update={"writer_fence": lease.fence})
    fresh = agent.new_session(request.session_id, tenant=request.tenant).snapshot()
    return fresh.model_copy(
        update={"writer_fence": lease.fence, "archive_batch_events": services.archive_batch_events}
    )
