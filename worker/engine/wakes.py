"""Waking parked calls whose time has come: the sweeper's part of a wait on the fleet.

Every sweep, :func:`wake_due` takes the due members of the timers index (one script per shard:
a member is taken by one sweeper, see :mod:`tether.runs.waits.base`), reads their wait records,
and submits one continuation per call, a run registered in the session's queue like any other
(so ``TETHER_REGISTERED_RUNS_ONLY`` holds: a worker registered it, in its own keyspace), whose
request id and run id derive from the call alone (:func:`~tether.runs.waits.base.wake_request_id`):
a second submission of the same wake is a duplicate the queue drops. The continuation settles the
call with the wait's result (:func:`~tether.runs.waits.wakes.wake_request`, shared with an
operator's wake, ``Producer.wake``) and runs on.
Once submitted, the members leave the index; a sweeper that dies before then leaves them to come
due again a redelivery delay later.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

from tether.core.events import now_ms
from tether.observability import metrics
from tether.runs.contract import RunRequest
from tether.runs.queue.base import SubmitState
from tether.runs.waits.base import TimerMember, WaitRecord
from tether.runs.waits.wakes import wake_request
from tether.worker.engine.child_runs import timeout_output as children_output
from tether.worker.engine.services import EngineServices

log = logging.getLogger(__name__)

#: Members taken per shard per pass (a pass repeats while shards give full batches).
TAKE_LIMIT = 200
#: The shortest pause between two passes of the timers thread (s).
MIN_PASS_S = 0.005


def wake_due(services: EngineServices, *, at_ms: int | None = None) -> int:
    """Submit the wakes of every parked call due now; how many were submitted (queued)."""
    index = services.waits
    if index is None:
        return 0
    woken = 0
    while True:
        members = index.take_due(at_ms or now_ms(), limit=TAKE_LIMIT)
        if not members:
            return woken
        woken += _wake(services, members)
        if len(members) < TAKE_LIMIT:
            return woken


class NextPass(NamedTuple):
    """When the timers thread passes next, and whether that pass takes due members."""

    pause_s: float
    take: bool
    """False while the index's first member is due after the pass: an idle fleet then probes
    each shard with one read, where a take runs a script per shard (and writes when it takes)."""


def next_pass(services: EngineServices, interval_s: float) -> NextPass:
    """The timers thread's next pass: at the next due time, at most ``interval_s`` away (a wake
    is submitted a moment after its due time, not a sweep later). A timer parked meanwhile by
    another worker is seen at the next probe, at most ``interval_s`` later, as before."""
    index = services.waits
    next_ms = index.next_due_ms() if index is not None else None
    if next_ms is None:
        return NextPass(interval_s, take=False)
    wait_s = (next_ms - now_ms()) / 1000
    if wait_s > interval_s:
        return NextPass(interval_s, take=False)
    return NextPass(max(MIN_PASS_S, wait_s), take=True)


def _wake(services: EngineServices, members: Sequence[TimerMember]) -> int:
    """Submit the wakes of ``members``, then drop them from the index."""
    assert services.waits is not None
    records = services.waits.get_many(members)
    requests = [
        wake_request(r, now_ms(), output=children_output(services, r))
        for r in records
        if r is not None
    ]
    kinds = {r.run_id: w.wait_for.kind for r, w in zip(requests, _present(records), strict=True)}
    queued = 0
    duplicates: list[RunRequest] = []
    for queue in {r.queue for r in records if r is not None}:
        batch = [q for q, r in zip(requests, _present(records), strict=True) if r.queue == queue]
        outcomes = services.runs.submit_many(batch, queue=queue)
        for request, outcome in zip(batch, outcomes, strict=True):
            if outcome.state is SubmitState.QUEUED:
                queued += 1
                services.wake(request.tenant, request.session_id)
                metrics.wait_woken(kinds[request.run_id])
            elif outcome.state is SubmitState.DUPLICATE:
                duplicates.append(request)
    _forget_finished(services, duplicates)
    services.waits.done(members)  # submitted (or no longer parked): out of the index
    return queued


def _forget_finished(services: EngineServices, duplicates: Sequence[RunRequest]) -> None:
    """Settle the records of wakes that already ran (a Redis rolled back to before their
    commit brought the records back; the wakes' own records say they finished)."""
    if not duplicates:
        return
    assert services.waits is not None
    results = services.runs.peek_many([r.ref for r in duplicates])
    for request in duplicates:
        if results.get(request.run_id) is not None:
            calls = [r.call_id for r in request.resolutions]
            services.waits.settle(request.tenant, request.session_id, calls)


def _present(records: Sequence[WaitRecord | None]) -> list[WaitRecord]:
    return [r for r in records if r is not None]
