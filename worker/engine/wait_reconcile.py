"""Rebuilding the wait index from the sessions' heads after Redis lost it (a flush, a rollback to
an older snapshot), reading only the sessions that wait.

Every ``TETHER_WAIT_RECONCILE_S`` a sweeper lists the durable marks (:mod:`tether.runs.waits.marks`)
and asks Redis, in one pipelined round trip, which marked sessions have wait records. For each one
without (and whose lease nobody holds: a worker may be committing it), it reads the session's head,
the truth: the calls still parked there are parked again from the mark's records (with the wait
the head holds), and a mark whose session waits for nothing is deleted once it is older than
:data:`MARK_GRACE_MS` (a mark is written before its head: a young one may be a commit on its way).

After Redis went back to an older state (a rollback, which
:meth:`~tether.runs.waits.base.WaitIndex.lost` tells), a session may have records, of calls it
parked before the snapshot, and still lack the call it parked since: the pass is then ``deep``,
and also rebuilds each recorded session whose mark names a call Redis does not hold, and forgets
the records Redis brought back of calls the head settled since (one head and one mark read per
waiting session, only then).
"""

from __future__ import annotations

import logging
import random
from typing import NamedTuple

from tether.core.events import now_ms
from tether.core.waits import WaitFor
from tether.runs.waits.base import WaitRecord
from tether.runs.waits.marks import WaitMark
from tether.runtime.signals import CURSOR_KEY, cursor_in
from tether.runtime.waiting import parked_calls
from tether.worker.engine.child_runs import forget_settled, parked_hook
from tether.worker.engine.services import EngineServices
from tether.worker.engine.signal_wakes import look_in_mailbox

log = logging.getLogger(__name__)

#: Each process's own order of the marks (not the global generator: a pass runs on the
#: sweeper's thread beside whatever else draws from it).
_ORDER = random.Random()

#: A mark younger than this is never deleted (its head may not be written yet).
MARK_GRACE_MS = 120_000


class Reconciled(NamedTuple):
    """What one pass did."""

    rebuilt: int
    """Sessions whose waits were parked again."""
    skipped: int
    """Sessions without wait records it could not check now (a worker held the lease, or the
    head did not read): a pass soon after should look again."""


def reconcile_waits(services: EngineServices, *, deep: bool = False) -> Reconciled:
    """One pass over the marks (``deep``: also the recorded sessions, see the module doc)."""
    index, marks = services.waits, services.marks
    if index is None or marks is None:
        return Reconciled(0, 0)
    sessions = list(marks.sessions())
    # every worker takes a pass at once after a flush: in its own order, each mostly finds the
    # sessions another already rebuilt (the check below), instead of both rebuilding each
    _ORDER.shuffle(sessions)
    known = _recorded(services, sessions)
    rebuilt = skipped = 0
    for (tenant, session_id), recorded in zip(sessions, known, strict=True):
        if recorded and not (deep and _behind(services, tenant, session_id)):
            continue
        if services.leases.holder(tenant, session_id) is not None:
            skipped += 1  # a worker is on it: it may be committing this very wait
            continue
        if not recorded and _recorded(services, [(tenant, session_id)])[0]:
            continue  # another worker's pass (all take one after a flush) rebuilt it meanwhile
        try:
            rebuilt += _rebuild(services, tenant, session_id)
        except Exception as exc:  # one unreadable session must not stop the others
            skipped += 1
            log.warning("wait reconcile skipped %s/%s: %s", tenant, session_id, exc)
    return Reconciled(rebuilt, skipped)


def _recorded(services: EngineServices, sessions: list[tuple[str, str]]) -> list[bool]:
    """Whether Redis holds wait records for each session (one round trip on Redis)."""
    assert services.waits is not None
    return services.waits.recorded(sessions)


def _behind(services: EngineServices, tenant: str, session_id: str) -> bool:
    """Whether the session's mark names a call Redis holds no record of. Records Redis brought
    back of calls the head settled since are forgotten on the way (nothing else would: only a
    wake of the call, dropped as a duplicate, touched them)."""
    assert services.waits is not None and services.marks is not None
    held = {r.call_id for r in services.waits.records(tenant, session_id)}
    stored = services.store.load_shallow(tenant, session_id)  # after the records: see below
    parked = parked_calls(stored.snapshot.memory.items) if stored is not None else {}
    # a record is written after the head that parks its call, so one the head read after it
    # does not park is settled for good
    if stale := [c for c in held if c not in parked]:
        services.waits.settle(tenant, session_id, stale)
        forget_settled(services, tenant, session_id)
        log.info("%s/%s: forgot %d call(s) settled since", tenant, session_id, len(stale))
    mark = services.marks.get(tenant, session_id)
    if mark is None:
        return False
    return any(r.call_id not in held for r in mark.records)


def _rebuild(services: EngineServices, tenant: str, session_id: str) -> int:
    """Park the calls the head holds parked again; delete an old mark of a session that waits
    for nothing; 1 when something was parked."""
    assert services.waits is not None and services.marks is not None
    mark = services.marks.get(tenant, session_id)
    if mark is None:
        return 0
    stored = services.store.load_shallow(tenant, session_id)
    parked = parked_calls(stored.snapshot.memory.items) if stored is not None else {}
    records = _still_parked(mark, parked)
    if records:
        services.waits.park(records)
        assert stored is not None  # a signal sent while Redis had no record of the wait
        cursor = cursor_in(stored.snapshot.metadata.attributes.get(CURSOR_KEY))
        look_in_mailbox(services, tenant, session_id, cursor, records)
        if (parked_again := parked_hook(services)) is not None:  # children that ended meanwhile
            parked_again(records)
        _settle_raced(services, tenant, session_id, records)
        log.info(
            "rebuilt the waits of %s/%s from its head: %d call(s)", tenant, session_id, len(records)
        )
        return 1
    if now_ms() - mark.written_at_ms >= MARK_GRACE_MS:
        services.marks.delete(tenant, session_id)
    return 0


def _settle_raced(
    services: EngineServices, tenant: str, session_id: str, records: list[WaitRecord]
) -> None:
    """Forget the records just parked whose calls a wake settled since the head was read.

    A wake commits its head, then settles its records: one that ran between our head read and
    our park (another worker's pass found the signal, the children, or the timer first) settled
    nothing we wrote, and nothing would wake the call again. Reading the head once more after the
    park closes that window: a wake committed before this read is seen here, one committed after
    it settles what we parked.
    """
    assert services.waits is not None
    stored = services.store.load_shallow(tenant, session_id)
    parked = parked_calls(stored.snapshot.memory.items) if stored is not None else {}
    raced = [r.call_id for r in records if r.call_id not in parked]
    if raced:
        services.waits.settle(tenant, session_id, raced)
        forget_settled(services, tenant, session_id)
        log.info("%s/%s: %d call(s) woken while rebuilt, forgotten", tenant, session_id, len(raced))


def _still_parked(mark: WaitMark, parked: dict[str, WaitFor]) -> list[WaitRecord]:
    """The mark's records whose calls the head still holds parked, with the head's wait."""
    return [
        r.model_copy(update={"wait_for": parked[r.call_id]})
        for r in mark.records
        if r.call_id in parked
    ]
