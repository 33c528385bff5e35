"""Claim-and-begin: the first round trip of a drain.

Before it can run anything, a drain registers the request its message carries (idempotently),
takes the session's lease, reads the head of the session's queue and that run's record, counts
the attempt and marks it running, and looks for the run's step checkpoint. Done one call at a
time that is five or six round trips before the agent starts; :class:`Claimer` does it as one.

The seam has a reference implementation, :class:`SequentialClaimer`, which makes exactly those
calls on the run queue, lease and checkpoint seams (the in-memory backends use it, and so do
engine services that name no claimer), and a one-script implementation on Redis
(:class:`~tether.worker.engine.claim_redis.RedisClaimer`). Both pass
``tests/test_claim_contract.py``.

The head run is *begun* by the claim only when it is runnable as far as the store can tell: it
has a record with its request, no result, no retry back-off pending, and no cancel flag. The
drain undoes the begin (:meth:`~tether.runs.queue.base.SessionQueue.hand_back`) in the rare case
it then hands the session over instead of running it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tether.core.events import now_ms
from tether.persistence.headcache.base import CachedHead, HeadCache
from tether.runs.contract import RunRef, RunRequest, WireRequest
from tether.runs.leases.base import Lease, LeaseManager
from tether.runs.queue.base import RunQueue, RunView, SubmitOutcome, submit
from tether.worker.engine.checkpoints.base import Checkpoint, CheckpointStore


@dataclass(frozen=True)
class Carried:
    """The request a run message carries, registered before the drain looks at the queue."""

    request: RunRequest
    queue: str | None = None
    """The broker queue that delivered it (recorded on a fresh registration)."""
    text: str | None = None
    """The request's JSON as the message carried it (:func:`~tether.runs.contract.parse_wire`);
    None: serialized when a claim needs it."""

    @property
    def wire(self) -> WireRequest:
        """The request with its JSON: what a claim registers, and compares with the record."""
        if self.text is None:
            return WireRequest.of(self.request)
        return WireRequest(self.request, self.text)


@dataclass(frozen=True)
class Claim:
    """What one claim found and did."""

    submitted: SubmitOutcome | None
    """The registration of the carried request (None when nothing was carried)."""
    lease: Lease | None
    """The lease granted (None: another holder has it, and nothing below was read)."""
    head: str | None = None
    """The run id at the head of the session's queue."""
    view: RunView | None = None
    """The head run's record, as read before the claim began it."""
    attempts: int | None = None
    """The attempt the claim counted when it began the head run (None: not begun)."""
    cancelled: bool = False
    """The head run was cancelled while queued: it was not begun and never starts."""
    checkpoint: Checkpoint | None = None
    """The head run's newest step checkpoint."""
    queued: int | None = None
    """How many runs the session's queue held, the head run included (None: not read)."""
    cache_read: bool = False
    """The claim read the session's cached head (:attr:`cached_head`), after dropping it when
    the lease was a takeover: the restore need not read the cache again."""
    cached_head: CachedHead | None = None
    """The session's cached head, when :attr:`cache_read` found one."""
    unregistered: bool = False
    """The session holds no record of the run the claim expected (``expect``): nothing was
    taken or read (a wake-up for a run nobody registered, TETHER_REGISTERED_RUNS_ONLY)."""

    @property
    def begun(self) -> bool:
        """True when the claim began the head run (its attempt is counted)."""
        return self.attempts is not None


class Claimer(Protocol):
    """Claim a session for a drain (see the module docstring)."""

    def claim(
        self,
        tenant: str,
        session_id: str,
        *,
        owner: str,
        ttl_ms: int,
        carried: Carried | None = None,
        expect: str | None = None,
    ) -> Claim:
        """Register ``carried``, take the lease for ``owner`` and begin the queue's head run;
        with ``expect`` (a run id), only when the session holds a record of that run
        (:attr:`Claim.unregistered` otherwise)."""


def runnable(view: RunView | None, at_ms: int) -> bool:
    """True when the claim may begin this run: a record with its request, no result, and no
    retry back-off pending at ``at_ms``."""
    return (
        view is not None
        and view.request is not None
        and view.result is None
        and view.retry_at_ms <= at_ms
    )


class SequentialClaimer:
    """The reference :class:`Claimer`: the same steps as separate calls on the seams."""

    def __init__(
        self,
        runs: RunQueue,
        leases: LeaseManager,
        checkpoints: CheckpointStore,
        head_cache: HeadCache | None = None,
    ) -> None:
        self._runs = runs
        self._leases = leases
        self._checkpoints = checkpoints
        self._head_cache = head_cache

    def claim(
        self,
        tenant: str,
        session_id: str,
        *,
        owner: str,
        ttl_ms: int,
        carried: Carried | None = None,
        expect: str | None = None,
    ) -> Claim:
        """Register ``carried``, take the lease for ``owner``, begin the queue's head run and
        read the session's cached head (after dropping it on a takeover); with ``expect``, only
        when the session holds a record of that run."""
        submitted = None
        if carried is not None:
            submitted = submit(self._runs, carried.request, on=carried.queue)
        if expect is not None and self._runs.get(RunRef(tenant, session_id, expect)) is None:
            return Claim(submitted, None, unregistered=True)
        lease = self._leases.acquire(tenant, session_id, owner, ttl_ms)
        if lease is None:
            return Claim(submitted, None)
        cache = self._head_cache
        if cache is not None and lease.takeover:
            # the previous holder may have written the head and died before caching it
            cache.drop(tenant, session_id)
        head = self._runs.head(tenant, session_id)
        if head is None:
            return Claim(submitted, lease)
        cached = None
        if cache is not None and not lease.takeover:
            cached = cache.get(tenant, session_id)
        ref = RunRef(tenant, session_id, head)
        view = self._runs.get(ref)
        checkpoint = self._checkpoints.load(tenant, session_id, head)
        attempts: int | None = None
        cancelled = False
        if runnable(view, now_ms()):
            attempts = self._runs.begin(ref, owner)
            cancelled = attempts is None
        return Claim(
            submitted,
            lease,
            head,
            view,
            attempts,
            cancelled,
            checkpoint,
            queued=self._runs.pending_count(tenant, session_id),
            cache_read=cache is not None,
            cached_head=cached,
        )
