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
from tether.runs.contract import BusyPolicy, RunRequest, RunResult
from tether.runs.leases.base import Lease, LeaseManager
from tether.runs.queue.base import (
    DONE_MAX_LEN,
    CancelOutcome,
    IdleRelease,
    RunState,
    RunView,
    StopMode,
    SubmitOutcome,
    SubmitState,
)

_Session = tuple[str, str]


@dataclass
class _State:
    runs: dict[str, RunView] = field(default_factory=dict)
    requests: dict[tuple[str, str, str], str] = field(default_factory=dict)
    pending: dict[_Session, list[str]] = field(default_factory=dict)
    active: dict[_Session, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    cancels: dict[str, StopMode] = field(default_factory=dict)
    kicks: dict[_Session, int] = field(default_factory=dict)
    done: list[tuple[int, str]] = field(default_factory=list)
    next_done: int = 1


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
        if known is not None:
            return SubmitOutcome(known, SubmitState.DUPLICATE)
        if request.run_id in st.runs:
            return SubmitOutcome(request.run_id, SubmitState.TAKEN)
        pending = st.pending.setdefault(session, [])
        if request.on_busy == BusyPolicy.REJECT and pending:
            return SubmitOutcome(request.run_id, SubmitState.BUSY)
        st.requests[(*session, request.request_id)] = request.run_id
        st.runs[request.run_id] = RunView(
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
        st.active.setdefault(session, self._clock())
        return SubmitOutcome(request.run_id, SubmitState.QUEUED)

    def record_rejected(self, result: RunResult) -> bool:
        """Record a run that never entered a queue; never rewrite an existing record."""
        validate_id(result.run_id, kind="run id")
        with self._lock:
            if result.run_id in self._state.runs:
                return False
            self._state.runs[result.run_id] = _finished_record(result)
            self._announce(result.run_id)
            return True

    def get(self, run_id: str) -> RunView | None:
        """The run record, or None when unknown."""
        validate_id(run_id, kind="run id")
        with self._lock:
            return self._state.runs.get(run_id)

    def peek_many(self, run_ids: Sequence[str]) -> dict[str, RunResult | None]:
        """The result of each known run (None while unfinished)."""
        for run_id in run_ids:
            validate_id(run_id, kind="run id")
        with self._lock:
            return {r: self._state.runs[r].result for r in run_ids if r in self._state.runs}

    # --- the session queue -------------------------------------------------------------------

    def head(self, tenant: str, session_id: str) -> str | None:
        """The run id at the head of the session's queue."""
        with self._lock:
            pending = self._state.pending.get(_key(tenant, session_id))
            return pending[0] if pending else None

    def begin(self, run_id: str, worker: str) -> int | None:
        """Count one more attempt and mark the run running, unless a cancel came first."""
        validate_id(run_id, kind="run id")
        with self._lock:
            st = self._state
            if run_id in st.cancels:
                return None
            st.attempts[run_id] = st.attempts.get(run_id, 0) + 1
            view = st.runs.get(run_id)
            if view is not None:
                st.runs[run_id] = replace(
                    view, status=RunState.RUNNING.value, started_at_ms=self._clock()
                )
            return st.attempts[run_id]

    def hand_back(self, run_id: str) -> None:
        """Undo :meth:`begin`: one attempt fewer, status QUEUED again."""
        validate_id(run_id, kind="run id")
        with self._lock:
            st = self._state
            view = st.runs.get(run_id)
            if view is None or view.result is not None:
                return
            st.attempts[run_id] = max(0, st.attempts.get(run_id, 0) - 1)
            st.runs[run_id] = replace(view, status=RunState.QUEUED.value)

    def note_failure(self, run_id: str, error: str, *, retry_after_ms: int = 0) -> None:
        """Remember why an attempt failed; never re-create a missing record."""
        validate_id(run_id, kind="run id")
        with self._lock:
            view = self._state.runs.get(run_id)
            if view is None:
                return
            retry_at_ms = self._clock() + retry_after_ms if retry_after_ms > 0 else view.retry_at_ms
            self._state.runs[run_id] = replace(
                view, last_error=error[:1000], retry_at_ms=retry_at_ms
            )

    def finish(self, result: RunResult) -> None:
        """Record the result, pop the run and announce it."""
        validate_id(result.run_id, kind="run id")
        session = _key(result.tenant, result.session_id)
        with self._lock:
            st = self._state
            view = st.runs.get(result.run_id)
            if view is not None:
                st.runs[result.run_id] = replace(view, status=result.status.value, result=result)
            else:  # expired or lost: the result is still worth keeping
                st.runs[result.run_id] = _finished_record(result)
            pending = st.pending.get(session, [])
            if result.run_id in pending:
                pending.remove(result.run_id)
            st.attempts.pop(result.run_id, None)
            if session in st.active:
                st.active[session] = self._clock()
            self._announce(result.run_id)

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
            self._state.active.pop(session, None)
            return IdleRelease.RELEASED

    # --- cancellation ------------------------------------------------------------------------

    def request_cancel(self, run_id: str) -> CancelOutcome:
        """Ask the run to stop (see :class:`~tether.runs.queue.base.CancelOutcome`)."""
        validate_id(run_id, kind="run id")
        with self._lock:
            view = self._state.runs.get(run_id)
            if view is None:
                return CancelOutcome.UNKNOWN
            if view.result is not None:
                return CancelOutcome.FINISHED
            self._state.cancels[run_id] = StopMode.CANCEL  # a cancel overrides an interrupt
            if view.status == RunState.QUEUED:
                return CancelOutcome.CANCELLED
            return CancelOutcome.REQUESTED

    def cancel_requested(self, run_id: str) -> bool:
        """True when someone asked the run to stop."""
        validate_id(run_id, kind="run id")
        with self._lock:
            return run_id in self._state.cancels

    def stop_mode(self, run_id: str) -> StopMode | None:
        """How the run was asked to stop, or None."""
        validate_id(run_id, kind="run id")
        with self._lock:
            return self._state.cancels.get(run_id)

    def preempt(self, tenant: str, session_id: str, run_id: str, mode: StopMode) -> str | None:
        """Ask the session's running run (not ``run_id``) to stop in ``mode``."""
        with self._lock:
            pending = self._state.pending.get(_key(tenant, session_id))
            head = pending[0] if pending else None
            view = self._state.runs.get(head) if head is not None else None
            if head is None or head == run_id or view is None:
                return None
            if view.status != RunState.RUNNING:
                return None
            self._state.cancels.setdefault(head, mode)
            return head

    # --- recovery ----------------------------------------------------------------------------

    def pending_count(self, tenant: str, session_id: str) -> int:
        """How many runs are queued for the session."""
        with self._lock:
            return len(self._state.pending.get(_key(tenant, session_id), []))

    def stale_sessions(self, idle_ms: int, limit: int = 100) -> list[tuple[str, str]]:
        """Active sessions without progress for ``idle_ms``, oldest first.

        Sessions of the same age are ordered by ``"<tenant>/<session>"``, as Redis orders the
        members of equal score in its ``active`` zset.
        """
        with self._lock:
            cutoff = self._clock() - idle_ms
            stale = sorted(
                (t, f"{tenant}/{session_id}", (tenant, session_id))
                for (tenant, session_id), t in self._state.active.items()
                if t <= cutoff
            )
            return [session for _, _, session in stale[:limit]]

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
                self._state.active.pop(session, None)

    # --- completions -------------------------------------------------------------------------

    def _announce(self, run_id: str) -> None:
        st = self._state
        st.done.append((st.next_done, run_id))
        st.next_done += 1
        del st.done[:-DONE_MAX_LEN]
        self._lock.notify_all()

    def done_last_id(self) -> bytes:
        """The position of the newest completion."""
        with self._lock:
            return f"{self._state.done[-1][0]}-0".encode() if self._state.done else b"0-0"

    def read_done(self, after_id: bytes, block_ms: int) -> list[tuple[bytes, str]]:
        """Completions after ``after_id``, waiting up to ``block_ms`` for one."""
        after = int(after_id.split(b"-")[0])
        deadline = time.monotonic() + block_ms / 1000
        with self._lock:
            while True:
                out = [(f"{n}-0".encode(), r) for n, r in self._state.done if n > after]
                remaining = deadline - time.monotonic()
                if out or remaining <= 0:
                    return out
                self._lock.wait(remaining)


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
