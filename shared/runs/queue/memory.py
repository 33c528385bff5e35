"""The run queue in one process: the Redis queue's semantics over dicts and one lock.

For tests and in-process cycles (the crash suite runs the real worker cycle on it). Submission,
finishing and idle release each hold the lock throughout, as the Redis scripts are atomic.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from tether.core.events import now_ms
from tether.ids import validate_id, validate_tenant
from tether.keys import RedisKeys
from tether.runs.contract import BusyPolicy, RunRef, RunRequest, RunResult
from tether.runs.leases.base import Lease, LeaseManager
from tether.runs.queue.base import (
    DONE_MAX_LEN,
    FEED_RESULT_MAX_BYTES,
    CancelOutcome,
    Completion,
    IdleRelease,
    IdleSession,
    RunState,
    RunView,
    StopMode,
    SubmitOutcome,
    SubmitState,
)
from tether.runs.usage.base import has_tokens
from tether.runs.usage.memory import InMemoryTenantUsage

_Session = tuple[str, str]


@dataclass
class _State:
    runs: dict[RunRef, RunView] = field(default_factory=dict)
    index: dict[tuple[str, str], str] = field(default_factory=dict)
    requests: dict[tuple[str, str, str], str] = field(default_factory=dict)
    pending: dict[_Session, list[str]] = field(default_factory=dict)
    active: dict[_Session, int] = field(default_factory=dict)
    queued: dict[_Session, int] = field(default_factory=dict)
    attempts: dict[RunRef, int] = field(default_factory=dict)
    cancels: dict[RunRef, StopMode] = field(default_factory=dict)
    kicks: dict[_Session, int] = field(default_factory=dict)
    done: dict[str | None, list[tuple[int, RunRef]]] = field(default_factory=dict)
    next_done: int = 1
    waiting: dict[RunRef, str] = field(default_factory=dict)


class InMemoryRunQueue:
    """:class:`~tether.runs.queue.base.RunQueue` in process memory.

    Args:
        leases: the lease manager of the same sessions (idle release and recovery read it).
        clock: milliseconds, injectable so tests can age sessions without sleeping.
    """

    def __init__(self, leases: LeaseManager, *, clock: Callable[[], int] = now_ms) -> None:
        self._leases = leases
        self._clock = clock
        self._state = _State()
        self._lock = threading.Condition()
        self.tenant_usage = InMemoryTenantUsage()

    # --- submissions -------------------------------------------------------------------------

    def submit_many(
        self, requests: Sequence[RunRequest], *, queue: str | None = None
    ) -> list[SubmitOutcome]:
        """Register and queue each request unless its request id is known."""
        for request in requests:  # the whole batch, before anything is written (as Redis)
            _key(request.tenant, request.session_id)
            validate_id(request.request_id, kind="request id")
            validate_id(request.run_id, kind="run id")
        with self._lock:
            return [self._submit(request, queue) for request in requests]

    def _submit(self, request: RunRequest, queue: str | None) -> SubmitOutcome:
        st = self._state
        session = (request.tenant, request.session_id)
        known = st.requests.get((*session, request.request_id))
        if known is not None or request.ref in st.runs:
            if known == request.run_id or known is None:  # this run exists in this session
                st.index.setdefault((request.tenant, request.run_id), request.session_id)
            if known is not None:
                return SubmitOutcome(known, SubmitState.DUPLICATE)
            return SubmitOutcome(request.run_id, SubmitState.TAKEN)
        pending = st.pending.setdefault(session, [])
        if request.on_busy == BusyPolicy.REJECT and pending:
            return SubmitOutcome(request.run_id, SubmitState.BUSY)
        st.requests[(*session, request.request_id)] = request.run_id
        st.runs[request.ref] = RunView(
            run_id=request.run_id,
            status=RunState.QUEUED.value,
            tenant=request.tenant,
            session_id=request.session_id,
            request_id=request.request_id,
            request=request,
            result=None,
            submitted_at_ms=request.submitted_at_ms,
            started_at_ms=0,
            queue=queue or None,
        )
        pending.append(request.run_id)
        st.index.setdefault((request.tenant, request.run_id), request.session_id)
        st.queued.setdefault(session, self._clock())  # the producer's mark; workers keep active
        return SubmitOutcome(request.run_id, SubmitState.QUEUED)

    def restricted(self) -> bool:
        """Never: one process holds every tenant's state."""
        return False

    def record_rejected(self, result: RunResult, *, reply_to: str | None = None) -> bool:
        """Record a run that never entered a queue; never rewrite an existing record."""
        ref = _ref(result.ref)
        with self._lock:
            if ref in self._state.runs:
                return False
            self._state.runs[ref] = _finished_record(result)
            self._state.index.setdefault((ref.tenant, ref.run_id), ref.session_id)
            self._announce(ref, reply_to, observers=False)  # a producer's own: its feed alone
            return True

    def locate(self, tenant: str, run_id: str) -> RunRef | None:
        """Where ``tenant``'s run lives, from the tenant's run-id index."""
        validate_tenant(tenant)
        validate_id(run_id, kind="run id")
        with self._lock:
            session_id = self._state.index.get((tenant, run_id))
        return RunRef(tenant, session_id, run_id) if session_id is not None else None

    def get(self, ref: RunRef) -> RunView | None:
        """The run record, or None when unknown."""
        ref = _ref(ref)
        with self._lock:
            return self._state.runs.get(ref)

    def peek_many(self, refs: Sequence[RunRef]) -> dict[str, RunResult | None]:
        """The result of each known run (None while unfinished), by run id."""
        refs = [_ref(r) for r in refs]
        with self._lock:
            runs = self._state.runs
            return {r.run_id: runs[r].result for r in refs if r in runs}

    # --- the session queue -------------------------------------------------------------------

    def head(self, tenant: str, session_id: str) -> str | None:
        """The run id at the head of the session's queue."""
        with self._lock:
            pending = self._state.pending.get(_key(tenant, session_id))
            return pending[0] if pending else None

    def begin(self, ref: RunRef, worker: str) -> int | None:
        """Count one more attempt and mark the run running, unless a cancel came first."""
        ref = _ref(ref)
        with self._lock:
            st = self._state
            st.active.setdefault((ref.tenant, ref.session_id), self._clock())
            if ref in st.cancels:
                return None
            st.attempts[ref] = st.attempts.get(ref, 0) + 1
            view = st.runs.get(ref)
            if view is not None:
                st.runs[ref] = replace(
                    view, status=RunState.RUNNING.value, started_at_ms=self._clock()
                )
            return st.attempts[ref]

    def hand_back(self, ref: RunRef) -> None:
        """Undo :meth:`begin`: one attempt fewer, status QUEUED again."""
        ref = _ref(ref)
        with self._lock:
            st = self._state
            view = st.runs.get(ref)
            if view is None or view.result is not None:
                return
            st.attempts[ref] = max(0, st.attempts.get(ref, 0) - 1)
            st.runs[ref] = replace(view, status=RunState.QUEUED.value)

    def note_failure(
        self, ref: RunRef, error: str, *, retry_after_ms: int = 0, before_commit: bool = False
    ) -> None:
        """Remember why an attempt failed; never re-create a missing record."""
        ref = _ref(ref)
        with self._lock:
            view = self._state.runs.get(ref)
            if view is None:
                return
            retry_at_ms = self._clock() + retry_after_ms if retry_after_ms > 0 else view.retry_at_ms
            self._state.runs[ref] = replace(
                view,
                last_error=error[:1000],
                retry_at_ms=retry_at_ms,
                failed_before_commit=view.failed_before_commit + int(before_commit),
            )

    def finish(self, result: RunResult, *, reply_to: str | None = None) -> str | None:
        """Record the result, pop the run and announce it."""
        ref = _ref(result.ref)
        session = (ref.tenant, ref.session_id)
        with self._lock:
            st = self._state
            view = st.runs.get(ref)
            if view is not None:
                st.runs[ref] = replace(view, status=result.status.value, result=result)
            else:  # expired or lost: the result is still worth keeping
                st.runs[ref] = _finished_record(result)
            pending = st.pending.get(session, [])
            if ref.run_id in pending:
                pending.remove(ref.run_id)
            st.attempts.pop(ref, None)
            st.active[session] = self._clock()
            if has_tokens(result.usage):
                self.tenant_usage.add(  # the wall clock's day, as on Redis (not the test clock)
                    ref.tenant, ref.run_id, result.usage, result.cost_usd, at_ms=now_ms()
                )
            self._announce(ref, reply_to)
            return pending[0] if pending else None

    def finish_and_release(
        self,
        result: RunResult,
        lease: Lease,
        *,
        reply_to: str | None = None,
        expect_idle: bool = False,
    ) -> tuple[str | None, IdleRelease | None]:
        """Finish the run, then release the lease when the queue is empty (one step)."""
        with self._lock:  # reentrant: one step for anyone else
            head = self.finish(result, reply_to=reply_to)
            if head is not None:
                return head, None
            return None, self.release_if_idle(lease)

    def note_waiting(self, ref: RunRef, what: str | None) -> None:
        """Show what the running run waits for (None: nothing)."""
        ref = _ref(ref)
        with self._lock:
            view = self._state.runs.get(ref)
            if view is not None:
                self._state.runs[ref] = replace(view, waiting=what)
            self._state.waiting.pop(ref, None)
            if what is not None:
                self._state.waiting[ref] = what

    def waiting_runs(self) -> list[tuple[RunRef, str]]:
        """The runs that wait now (in the order they began to wait)."""
        with self._lock:
            return list(self._state.waiting.items())

    def drop(self, tenant: str, session_id: str, run_id: str) -> None:
        """Remove a run id from the session queue."""
        with self._lock:
            pending = self._state.pending.get(_key(tenant, session_id), [])
            if run_id in pending:
                pending.remove(run_id)

    def release_if_idle(self, lease: Lease) -> IdleRelease:
        """Release the lease only when the session queue is empty."""
        with self._lock:
            session = _key(lease.tenant, lease.session_id)
            if self._leases.holder(*session) != lease.owner or (
                self._leases.current_fence(*session) != lease.fence
            ):
                return IdleRelease.LOST
            if self._state.pending.get(session):
                return IdleRelease.BUSY
            self._leases.release(lease)
            self._leave(session)
            return IdleRelease.RELEASED

    # --- cancellation ------------------------------------------------------------------------

    def request_cancel(self, ref: RunRef) -> CancelOutcome:
        """Ask the run to stop (see :class:`~tether.runs.queue.base.CancelOutcome`)."""
        ref = _ref(ref)
        with self._lock:
            view = self._state.runs.get(ref)
            if view is None:
                return CancelOutcome.UNKNOWN
            if view.result is not None:
                return CancelOutcome.FINISHED
            self._state.cancels[ref] = StopMode.CANCEL  # a cancel overrides an interrupt
            if view.status == RunState.QUEUED:
                return CancelOutcome.CANCELLED
            return CancelOutcome.REQUESTED

    def cancel_requested(self, ref: RunRef) -> bool:
        """True when someone asked the run to stop."""
        ref = _ref(ref)
        with self._lock:
            return ref in self._state.cancels

    def stop_mode(self, ref: RunRef) -> StopMode | None:
        """How the run was asked to stop, or None."""
        ref = _ref(ref)
        with self._lock:
            return self._state.cancels.get(ref)

    def preempt(self, tenant: str, session_id: str, run_id: str, mode: StopMode) -> str | None:
        """Ask the session's running run (not ``run_id``) to stop in ``mode``."""
        with self._lock:
            pending = self._state.pending.get(_key(tenant, session_id))
            head = pending[0] if pending else None
            ref = RunRef(tenant, session_id, head) if head is not None else None
            view = self._state.runs.get(ref) if ref is not None else None
            if ref is None or head == run_id or view is None:
                return None
            if view.status != RunState.RUNNING:
                return None
            self._state.cancels.setdefault(ref, mode)
            return head

    # --- recovery ----------------------------------------------------------------------------

    def pending_count(self, tenant: str, session_id: str) -> int:
        """How many runs are queued for the session."""
        with self._lock:
            return len(self._state.pending.get(_key(tenant, session_id), []))

    def idle_sessions(self, idle_ms: int, limit: int = 100) -> list[IdleSession]:
        """Active sessions without progress for ``idle_ms``, oldest first, with how long each
        has been idle.

        Sessions of the same age are ordered by ``"<tenant>/<session>"``, as Redis orders the
        members of equal score in its ``active`` zset.
        """
        with self._lock:
            now = self._clock()
            stale = sorted(
                (t, f"{tenant}/{session_id}", (tenant, session_id))
                for (tenant, session_id), t in self._state.active.items()
                if t <= now - idle_ms
            )
            return [IdleSession(*session, int(now - t)) for t, _, session in stale[:limit]]

    def claim_kick(self, tenant: str, session_id: str, ttl_ms: int) -> bool:
        """Claim re-enqueueing the session for ``ttl_ms``."""
        with self._lock:
            session = _key(tenant, session_id)
            now = self._clock()
            if self._state.kicks.get(session, 0) > now:
                return False
            self._state.kicks[session] = now + ttl_ms
            if session in self._state.active:
                self._state.active[session] = now
            return True

    def forget_if_idle(self, tenant: str, session_id: str) -> None:
        """Drop the session from the active set when it has no queue and no lease."""
        with self._lock:
            session = _key(tenant, session_id)
            if self._leases.holder(*session) is None and not self._state.pending.get(session):
                self._leave(session)

    def unclaimed_sessions(self, idle_ms: int, limit: int = 100) -> list[tuple[str, str]]:
        """Sessions a producer queued a run on ``idle_ms`` ago or more, whose queue has not
        been empty since, oldest first."""
        with self._lock:
            cutoff = self._clock() - idle_ms
            found = sorted((t, session) for session, t in self._state.queued.items() if t <= cutoff)
            return [session for _, session in found[:limit]]

    def _leave(self, session: _Session) -> None:
        """Drop an idle session from the active and the queued index (the lock is held)."""
        self._state.active.pop(session, None)
        self._state.queued.pop(session, None)

    # --- completions -------------------------------------------------------------------------

    def close_feed(self, feed: str) -> None:
        """Drop a producer's feed."""
        with self._lock:
            self._state.done.pop(feed, None)

    def _announce(self, ref: RunRef, reply_to: str | None, *, observers: bool = True) -> None:
        st = self._state
        mine = None if reply_to is None else RedisKeys.feed(ref.tenant, reply_to)
        feeds = {None, mine} if observers else {mine} - {None}
        for feed in feeds:
            entries = st.done.setdefault(feed, [])
            entries.append((st.next_done, ref))
            del entries[:-DONE_MAX_LEN]
        st.next_done += 1
        self._lock.notify_all()

    def feed_shards(self, feed: str | None = None) -> int:
        """One: a process's memory has no slots to spread a feed over."""
        return 1

    def feed_readers(self, feed: str | None = None) -> list[int | None]:
        """One reader of the whole feed."""
        return [None]

    def done_last_id(self, feed: str | None = None, shard: int | None = None) -> bytes:
        """The position of the newest completion of ``feed`` (its one shard)."""
        with self._lock:
            entries = self._state.done.get(feed)
            return f"{entries[-1][0]}-0".encode() if entries else b"0-0"

    def read_completions(
        self, after_id: bytes, block_ms: int, feed: str | None = None, shard: int | None = None
    ) -> list[Completion]:
        """:meth:`read_done` with each run's result (a producer's feed carries it)."""
        entries = self.read_done(after_id, block_ms, feed)
        with self._lock:
            runs = self._state.runs
            return [
                Completion(position, ref, _carried(runs.get(ref), feed))
                for position, ref in entries
            ]

    def read_done(
        self, after_id: bytes, block_ms: int, feed: str | None = None, shard: int | None = None
    ) -> list[tuple[bytes, RunRef]]:
        """Completions of ``feed`` after ``after_id``, waiting up to ``block_ms`` for one."""
        after = int(after_id.split(b"-")[0])
        deadline = time.monotonic() + block_ms / 1000
        with self._lock:
            while True:
                entries = self._state.done.get(feed, [])
                out = [(f"{n}-0".encode(), r) for n, r in entries if n > after]
                remaining = deadline - time.monotonic()
                if out or remaining <= 0:
                    return out
                self._lock.wait(remaining)


def _carried(view: RunView | None, feed: str | None) -> RunResult | None:
    """The result a feed entry carries: a small one, on a producer's feed (as on Redis)."""
    result = view.result if view is not None else None
    if feed is None or result is None:
        return None
    return result if len(result.model_dump_json()) <= FEED_RESULT_MAX_BYTES else None


def _finished_record(result: RunResult) -> RunView:
    """A record holding only a result (its request was never queued here, or is gone)."""
    return RunView(
        run_id=result.run_id,
        status=result.status.value,
        tenant=result.tenant,
        session_id=result.session_id,
        request_id=result.request_id,
        request=None,
        result=result,
        submitted_at_ms=0,
        started_at_ms=0,
    )


def _key(tenant: str, session_id: str) -> _Session:
    return validate_tenant(tenant), validate_id(session_id)


def _ref(ref: RunRef) -> RunRef:
    _key(ref.tenant, ref.session_id)
    validate_id(ref.run_id, kind="run id")
    return RunRef(*ref)
