"""RunHandle: a :class:`concurrent.futures.Future` of a distributed run, also awaitable.

A handle is cheap: building one does no I/O. The first call that needs the outcome
(``result``, ``done``, ``add_done_callback``, ``await``, or ``concurrent.futures.wait`` /
``as_completed`` installing their waiter) registers it with its producer's single completion
listener, which settles every handle of that producer through ``Future.set_result`` /
``set_exception`` / cancellation (no thread per handle, no polling).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures._base import CANCELLED
from typing import Any, Protocol

from tether.core.events import AgentEvent
from tether.errors import TetherError
from tether.persistence.deltas.base import LiveDelta
from tether.persistence.deltas.live_redis import RedisLiveFeed
from tether.persistence.streams.redis import RedisEventStream
from tether.producer.follow import Deadline, next_run_id
from tether.producer.listener import CompletionListener
from tether.producer.settlement import (
    END_WAIT_S,
    STREAM_BLOCK_MS,
    RunFollow,
    RunIds,
    cancelled_before_start,
    cancelled_error,
    failure_of,
    is_cancelled,
    never_started,
    not_found,
)
from tether.runs.contract import RunRef, RunResult
from tether.runs.queue.base import CancelOutcome, RunState, RunView

log = logging.getLogger(__name__)

_Future = concurrent.futures.Future


class Records(Protocol):
    """The run records a :class:`RunHandle` reads."""

    def get(self, ref: RunRef) -> RunView | None:
        """The run record, or None when unknown or expired."""


class HandleOwner(Protocol):
    """What a :class:`RunHandle` uses of its producer
    (:class:`~tether.producer.client.Producer`)."""

    @property
    def runs(self) -> Records:
        """The run queue (the handle reads run records)."""

    @property
    def event_stream(self) -> RedisEventStream:
        """The sessions' live event streams."""

    @property
    def live(self) -> RedisLiveFeed:
        """The sessions' live events and pieces."""

    def locate(self, run_id: str, *, tenant: str | None = None) -> RunRef | None:
        """Where run ``run_id`` of ``tenant`` (default: the producer's) lives, or None."""

    def listener_for(self, tenant: str) -> CompletionListener:
        """The completion listener of ``tenant``'s runs."""

    def cancel(self, run_id: str, *, tenant: str | None = None) -> CancelOutcome:
        """Ask a run to stop."""

    def handle(self, run_id: str, *, tenant: str | None = None) -> RunHandle:
        """A handle on an existing run (a continuation a follower goes on with)."""


class _RegisteringWaiters(list[Any]):
    """The future's waiter list: ``wait`` and ``as_completed`` read a future's state and append
    their waiter without calling any method of it, so appending is where a handle nobody asked
    yet gets registered with the listener."""

    def __init__(self, on_append: Callable[[], None]) -> None:
        super().__init__()
        self._on_append = on_append

    def append(self, waiter: Any) -> None:
        super().append(waiter)  # first: a settlement during registration must notify it
        self._on_append()


#: The first wait before a failed lookup of a reattached handle's run is tried again, and the
#: longest (it doubles between).
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 5.0


class RunHandle(concurrent.futures.Future[RunResult]):
    """The handle of one run: a real :class:`concurrent.futures.Future`.

    ``result()`` returns the :class:`RunResult` of a run that completed (also ``WAITING`` or
    ``CONTINUATION_REQUIRED``), raises the recorded error (a :class:`TetherError` subclass whose
    ``.result`` is the RunResult) for a failed run, and raises
    :class:`concurrent.futures.CancelledError` for a cancelled one (``cancelled()`` is then
    True). ``concurrent.futures.wait``, ``as_completed`` and ``asyncio.wrap_future`` accept
    handles; ``await handle`` works too (cancelling the awaiting task does not cancel the run).
    """

    def __init__(
        self,
        producer: HandleOwner,
        run_id: str,
        *,
        request_id: str | None = None,
        session_id: str | None = None,
        tenant: str | None = None,
        queued_after: float | None = None,
    ) -> None:
        super().__init__()
        self._producer = producer
        self._ids = RunIds(run_id, request_id, session_id, tenant)
        #: ``time.monotonic()`` before this producer queued the run (None: not queued by it
        #: here): the listener needs no first look at a run queued after it took its position.
        self._queued_after = queued_after
        self._register_lock = threading.Lock()
        self._registered = False
        self._retry: threading.Timer | None = None
        self._retries = 0
        self._recorded: RunResult | None = None  # the result of a cancelled run
        self._waiters = _RegisteringWaiters(self._ensure_quietly)

    @property
    def run_id(self) -> str:
        """The run id."""
        return self._ids.run_id

    def __repr__(self) -> str:
        state = "done" if _Future.done(self) else "pending"
        return f"<RunHandle {self.run_id} {state}>"

    # --- identity (loaded lazily for handles reattached by run id) ---------------------------

    def _ref(self) -> RunRef | None:
        """Where the run lives; a handle reattached by run id asks its tenant's run index once
        (None: that tenant has no such run)."""
        ref = self._ids.ref()
        if ref is None:
            ref = self._producer.locate(self.run_id, tenant=self._ids.tenant)
            if ref is not None:
                self._ids.learn("", ref.session_id, ref.tenant)
        return ref

    def _load_ids(self) -> None:
        if self._ids.request_id is None:
            ref = self._ref()
            view = self._producer.runs.get(ref) if ref is not None else None
            if view is not None:
                self._ids.learn(view.request_id, view.session_id, view.tenant)

    @property
    def request_id(self) -> str | None:
        """The request id (idempotency key)."""
        self._load_ids()
        return self._ids.request_id

    @property
    def session_id(self) -> str | None:
        """The session the run applies to."""
        self._load_ids()
        return self._ids.session_id

    @property
    def tenant(self) -> str | None:
        """The session's tenant."""
        self._load_ids()
        return self._ids.tenant

    # --- settlement ----------------------------------------------------------------------------

    def _ensure(self) -> None:
        """Register with the producer's listener once (it settles the handle)."""
        with self._register_lock:
            if self._registered:
                return
            self._registered = True
        try:
            ref = self._ref()  # a reattached handle looks its run up: I/O that may fail
        except BaseException:
            with self._register_lock:  # not registered: tried again, by the next wait or later
                self._registered = False
            self._retry_later()
            raise
        if ref is None:
            self._settle(not_found(self.run_id, self._ids.tenant or ""))
            return
        self._producer.listener_for(ref.tenant).register(
            ref, self._settle, queued_after=self._queued_after
        )

    def _retry_later(self) -> None:
        """Look the run up again in the background (backing off to :data:`RETRY_MAX_S`): a wait
        that only registers a callback (``await handle``, ``add_done_callback``) or that came
        while the failed lookup ran has no later call of its own to try again, and nothing
        else would ever settle it."""
        with self._register_lock:
            if self._retry is not None or _Future.done(self):
                return
            delay_s = min(RETRY_MAX_S, RETRY_FIRST_S * 2**self._retries)
            self._retries += 1
            self._retry = timer = threading.Timer(delay_s, self._retried)
            timer.daemon = True
        timer.start()

    def _retried(self) -> None:
        with self._register_lock:
            self._retry = None
        if not _Future.done(self):
            self._ensure_quietly()

    def _ensure_quietly(self) -> None:
        try:
            self._ensure()
        except TetherError as exc:
            # registered (the listener settles it once Redis answers), or not yet (looked up
            # again in the background): either way the handle resolves without another call
            log.warning("checking run %s failed (%s); it is checked again", self.run_id, exc)

    def _settle(self, result: RunResult) -> None:
        """Resolve the future from a recorded result (called by the listener, once)."""
        result = self._ids.complete(result)
        if is_cancelled(result):
            self._cancel_locally(result)
            return
        error = failure_of(result)
        try:
            if error is None:
                self.set_result(result)
            else:
                self.set_exception(error)
        except concurrent.futures.InvalidStateError:
            pass  # this handle's own cancel() got there first

    def _cancel_locally(self, result: RunResult) -> bool:
        """Make the future cancelled (notifying ``wait``/``as_completed`` waiters)."""
        with self._condition:
            if not _Future.done(self):
                self._recorded = result
        if not _Future.cancel(self):
            return False
        with self._condition:  # reentrant: one caller moves it on, exactly once
            if self._state == CANCELLED:
                _Future.set_running_or_notify_cancel(self)
        return True

    # --- the future protocol -----------------------------------------------------------------

    def result(self, timeout: float | None = None, *, follow: bool = False) -> RunResult:
        """Wait for the run; see the class docstring for what is raised.

        ``follow``: a run that ends ``WAITING`` on the fleet (a timer...) is followed into the
        continuation that goes on with it, to the end of the chain (see
        :mod:`tether.producer.follow`); ``timeout`` covers the whole chain.
        """
        if follow:
            return self.follow_to_end(timeout).result(timeout=0)
        self._ensure()
        try:
            return super().result(timeout=timeout)
        except concurrent.futures.CancelledError:
            raise cancelled_error(self.run_id) from None

    def follow_to_end(self, timeout: float | None = None) -> RunHandle:
        """The handle of the last run of this run's chain (the run, then each continuation the
        fleet goes on with after a pause: see :mod:`tether.producer.follow`), once it has
        finished.

        Raises:
            TimeoutError: the chain did not finish within ``timeout`` seconds (it goes on).
        """
        deadline, handle = Deadline(timeout), self
        while True:
            result = handle.run_result(timeout=deadline.left())
            next_id, tenant = next_run_id(result), result.tenant
            if next_id is None:
                return handle
            while self._producer.locate(next_id, tenant=tenant) is None:
                time.sleep(deadline.pause())  # the wake is not submitted yet
            handle = self._producer.handle(next_id, tenant=tenant)

    def run_result(self, timeout: float | None = None) -> RunResult:
        """The recorded :class:`RunResult` whatever the status (never raises the run's error)."""
        self._ensure()
        try:
            return super().result(timeout=timeout)
        except concurrent.futures.CancelledError:
            return self._recorded or cancelled_before_start(self._ids)
        except TimeoutError:
            raise
        except Exception as exc:
            recorded = getattr(exc, "result", None)
            if isinstance(recorded, RunResult):
                return recorded
            raise

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The run's error (None when it succeeded); raises CancelledError when cancelled."""
        self._ensure()
        try:
            return super().exception(timeout=timeout)
        except concurrent.futures.CancelledError:
            raise cancelled_error(self.run_id) from None

    def done(self) -> bool:
        """True when the run finished (any terminal status)."""
        if _Future.done(self):
            return True
        self._ensure()
        return _Future.done(self)

    def running(self) -> bool:
        """True while a worker is executing the run."""
        if _Future.done(self):
            return False
        ref = self._ref()
        view = self._producer.runs.get(ref) if ref is not None else None
        return view is not None and view.status == RunState.RUNNING

    def cancelled(self) -> bool:
        """True when the run ended cancelled."""
        return self.done() and _Future.cancelled(self)

    def cancel(self) -> bool:
        """Cancel the run if it has not started (like :meth:`concurrent.futures.Future.cancel`).

        True when the run was still queued: it will never start, and the handle is cancelled at
        once. A running run is asked to stop at its next step boundary, but this answers False,
        because it may still finish (use :meth:`Producer.cancel` for the outcome). On a finished
        handle: True only if the run was cancelled before it started.
        """
        if _Future.done(self):
            return _Future.cancelled(self) and never_started(self._recorded)
        if self._producer.cancel(self.run_id) is not CancelOutcome.CANCELLED:
            return False
        return self._cancel_locally(cancelled_before_start(self._ids))

    def add_done_callback(self, fn: Callable[[_Future[RunResult]], object]) -> None:
        """Call ``fn(handle)`` once the run finished (immediately when it already has)."""
        super().add_done_callback(fn)
        self._ensure_quietly()

    def __await__(self) -> Generator[Any, None, RunResult]:
        """``await handle`` waits for the run without blocking the event loop."""
        loop = asyncio.get_running_loop()
        wakeup: asyncio.Future[None] = loop.create_future()

        def wake(_: object) -> None:
            if not wakeup.done():
                wakeup.set_result(None)

        def from_any_thread(_: object) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody awaits any more
                loop.call_soon_threadsafe(wake, None)

        self.add_done_callback(from_any_thread)
        yield from wakeup.__await__()
        return self.result(timeout=0)

    # --- live events ---------------------------------------------------------------------------

    def events(self, *, idle_timeout_s: float | None = 60.0) -> Iterator[AgentEvent]:
        """This run's events, live, until the run has ended and all its events were seen.

        Events come from the session's stream; other runs' events are skipped. Stops after
        ``idle_timeout_s`` without any event while the run is still unfinished (None: never).
        """
        tenant, session_id = self.tenant, self.session_id
        if tenant is None or session_id is None:
            return
        self._ensure()
        follow = RunFollow(self.run_id)
        while True:
            for event in self._producer.event_stream.tail(
                tenant, session_id, after_seq=follow.last_seq, block_ms=200, idle_timeout_s=0.3
            ):
                if follow.event(event):
                    yield event
            if follow.over(self._final(), idle_timeout_s):
                return

    def _final(self) -> RunResult | None:
        """The run's result once the handle is settled, else None (no wait, no I/O)."""
        return self.run_result() if _Future.done(self) else None

    def stream(
        self, *, idle_timeout_s: float | None = 60.0, follow: bool = False
    ) -> Iterator[AgentEvent | LiveDelta | RunResult]:
        """This run live, events and pieces in order, ending with its :class:`RunResult`
        whatever the status (a failed or cancelled run ends the stream with its result, nothing
        is raised; see docs/streaming.md).

        Pieces come while a worker streams a step, before that step's ``MODEL_RESPONSE``; a
        step redone after a crash starts again with pieces of a higher ``fence``. Stops without
        a result after ``idle_timeout_s`` with nothing new while the run is unfinished (None:
        never).

        ``follow``: go on across the run's pauses on the fleet, into each continuation (see
        :meth:`result`): every run's items and its :class:`RunResult` (a ``WAITING`` one marks a
        pause), to the last; waiting for a continuation counts as idle time.
        """
        if follow:
            yield from self._stream_followed(idle_timeout_s)
            return
        tenant, session_id = self.tenant, self.session_id
        if tenant is None or session_id is None:
            return
        self._ensure()
        follow_run = RunFollow(self.run_id)
        while True:
            for item in self._producer.live.follow(
                tenant,
                session_id,
                after_seq=follow_run.last_seq,
                block_ms=STREAM_BLOCK_MS,
                idle_timeout_s=idle_timeout_s,
                stop=lambda: follow_run.stops(self._final()),
                on_end=follow_run.end,
                whole_steps=True,
            ):
                if follow_run.item(item):
                    yield item
            if follow_run.ended:  # finished: the listener settles the future from the same commit
                concurrent.futures.wait([self], timeout=END_WAIT_S)
            if not follow_run.again(self._final()):
                break
        final = self._final()
        if final is not None:
            yield final

    def _stream_followed(
        self, idle_timeout_s: float | None
    ) -> Iterator[AgentEvent | LiveDelta | RunResult]:
        handle: RunHandle = self
        while True:
            final: RunResult | None = None
            for item in handle.stream(idle_timeout_s=idle_timeout_s):
                final = item if isinstance(item, RunResult) else final
                yield item
            next_id = next_run_id(final) if final is not None else None
            if final is None or next_id is None:
                return
            deadline = Deadline(idle_timeout_s)
            try:
                while self._producer.locate(next_id, tenant=final.tenant) is None:
                    time.sleep(deadline.pause())
            except TimeoutError:
                return  # idle too long: the stream ends, as an idle run's does
            handle = self._producer.handle(next_id, tenant=final.tenant)
