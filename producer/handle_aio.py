"""AsyncRunHandle: an awaitable handle on a distributed run, for asyncio code (the twin of
:class:`~tether.producer.handle.RunHandle`).

Like ``RunHandle``, building one does no I/O; the first wait registers it with its producer's
asyncio completion listener, which settles every handle of that producer from one ``XREAD``
loop on the event loop (no thread, no polling). What waiting returns or raises, and what the
handle gives of its session's live streams, is decided by the same core
(:mod:`tether.producer.settlement`) as for ``RunHandle``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Generator
from typing import Any, Protocol

from tether.core.events import AgentEvent
from tether.persistence.deltas.base import LiveDelta
from tether.persistence.deltas.live_redis_aio import AsyncRedisLiveFeed
from tether.persistence.streams.redis_aio import AsyncRedisEventStream
from tether.producer.follow import Deadline, next_run_id
from tether.producer.listener_aio import AsyncCompletionListener
from tether.producer.settlement import (
    END_WAIT_S,
    STREAM_BLOCK_MS,
    RunFollow,
    RunIds,
    cancelled_before_start,
    is_cancelled,
    never_started,
    not_found,
    outcome,
)
from tether.runs.contract import RunRef, RunResult
from tether.runs.queue.base import CancelOutcome, RunState, RunView


class AsyncRecords(Protocol):
    """The run records an :class:`AsyncRunHandle` reads."""

    async def get(self, ref: RunRef) -> RunView | None:
        """The run record, or None when unknown or expired."""


class AsyncHandleOwner(Protocol):
    """What an :class:`AsyncRunHandle` uses of its producer
    (:class:`~tether.producer.client_aio.AsyncProducer`)."""

    @property
    def runs(self) -> AsyncRecords:
        """The run queue (the handle reads run records)."""

    @property
    def event_stream(self) -> AsyncRedisEventStream:
        """The sessions' live event streams."""

    @property
    def live(self) -> AsyncRedisLiveFeed:
        """The sessions' live events and pieces."""

    async def locate(self, run_id: str, *, tenant: str | None = None) -> RunRef | None:
        """Where run ``run_id`` of ``tenant`` (default: the producer's) lives, or None."""

    def listener_for(self, tenant: str) -> AsyncCompletionListener:
        """The completion listener of ``tenant``'s runs."""

    def handle(self, run_id: str, *, tenant: str | None = None) -> AsyncRunHandle:
        """A handle on an existing run (a continuation a follower goes on with)."""

    async def cancel(self, run_id: str, *, tenant: str | None = None) -> CancelOutcome:
        """Ask a run to stop."""


class AsyncRunHandle:
    """The handle of one run submitted by an :class:`~tether.producer.client_aio.AsyncProducer`.

    ``await handle`` (or ``await handle.result()``) returns the :class:`RunResult` of a run that
    completed (also ``WAITING`` or ``CONTINUATION_REQUIRED``), raises the recorded error (a
    :class:`TetherError` subclass whose ``.result`` is the RunResult) for a failed run, and raises
    :class:`concurrent.futures.CancelledError` for a cancelled one. Cancelling the awaiting task
    stops the wait only; the run goes on (use :meth:`cancel`). Use a handle on one event loop.
    """

    def __init__(
        self,
        producer: AsyncHandleOwner,
        run_id: str,
        *,
        request_id: str | None = None,
        session_id: str | None = None,
        tenant: str | None = None,
        queued_after: float | None = None,
    ) -> None:
        self._producer = producer
        self._ids = RunIds(run_id, request_id, session_id, tenant)
        #: ``time.monotonic()`` before this producer queued the run (None: not queued by it
        #: here): the listener needs no first look at a run queued after it took its position.
        self._queued_after = queued_after
        self._settled: asyncio.Future[RunResult] | None = None
        self._registration: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"<AsyncRunHandle {self.run_id} {'done' if self.done() else 'pending'}>"

    @property
    def run_id(self) -> str:
        """The run id."""
        return self._ids.run_id

    @property
    def request_id(self) -> str | None:
        """The request id (idempotency key).

        None for a handle reattached by run id, until :meth:`load`.
        """
        return self._ids.request_id

    @property
    def session_id(self) -> str | None:
        """The session the run applies to.

        None for a handle reattached by run id, until :meth:`load`.
        """
        return self._ids.session_id

    @property
    def tenant(self) -> str | None:
        """The session's tenant.

        None for a handle reattached by run id, until :meth:`load`.
        """
        return self._ids.tenant

    async def load(self) -> AsyncRunHandle:
        """Read the run's ids from its record (a handle reattached by run id knows only it)."""
        if self._ids.request_id is None:
            ref = await self._ref()
            view = await self._producer.runs.get(ref) if ref is not None else None
            if view is not None:
                self._ids.learn(view.request_id, view.session_id, view.tenant)
        return self

    async def _ref(self) -> RunRef | None:
        """Where the run lives (see ``RunHandle._ref``)."""
        ref = self._ids.ref()
        if ref is None:
            ref = await self._producer.locate(self.run_id, tenant=self._ids.tenant)
            if ref is not None:
                self._ids.learn("", ref.session_id, ref.tenant)
        return ref

    # --- settlement ----------------------------------------------------------------------------

    async def _ensure(self) -> asyncio.Future[RunResult]:
        """The future the listener settles, registered once: a wait that is cancelled (its
        ``wait_for``) while the run is looked up leaves the lookup running for the next wait,
        and a lookup that failed (Redis away) is tried again by the next wait; either left the
        handle waiting for good on a future nothing would settle."""
        if self._settled is None:
            self._settled = asyncio.get_running_loop().create_future()
        registration = self._registration
        if (
            registration is not None
            and registration.done()
            and (registration.cancelled() or registration.exception() is not None)
        ):
            registration = None  # failed while its waiter was cancelled: look again now
        if registration is None:
            registration = self._registration = asyncio.ensure_future(self._register())
            registration.add_done_callback(_retrieved)
        try:
            await asyncio.shield(registration)
        except asyncio.CancelledError:
            raise
        except Exception:
            if self._registration is registration:
                self._registration = None
            raise
        return self._settled

    async def _register(self) -> None:
        ref = await self._ref()
        if ref is None:
            self._settle(not_found(self.run_id, self._ids.tenant or ""))
        else:
            listener = self._producer.listener_for(ref.tenant)
            await listener.register(ref, self._settle, queued_after=self._queued_after)

    def _settle(self, result: RunResult) -> None:
        """Resolve from a recorded result (called on the loop by the listener, once)."""
        result = self._ids.complete(result)
        if self._settled is not None and not self._settled.done():
            self._settled.set_result(result)

    def done(self) -> bool:
        """True when the run finished (any terminal status).

        No I/O: a handle nobody waited on yet answers False.
        """
        return self._settled is not None and self._settled.done()

    def cancelled(self) -> bool:
        """True when the run ended cancelled.

        Known once the handle is settled.
        """
        return self.done() and is_cancelled(self._settled_result())

    async def running(self) -> bool:
        """True while a worker is executing the run."""
        if self.done():
            return False
        ref = await self._ref()
        view = await self._producer.runs.get(ref) if ref is not None else None
        return view is not None and view.status == RunState.RUNNING

    def _settled_result(self) -> RunResult:
        assert self._settled is not None
        return self._settled.result()

    async def run_result(self, timeout: float | None = None) -> RunResult:
        """The recorded :class:`RunResult` whatever the status (never raises the run's error).

        Raises:
            TimeoutError: the run did not finish within ``timeout`` seconds (it goes on).
        """
        settled = await self._ensure()
        async with asyncio.timeout(timeout):
            # shielded: a timeout or a cancelled caller must not settle the handle
            return await asyncio.shield(settled)

    async def result(self, timeout: float | None = None, *, follow: bool = False) -> RunResult:
        """Wait for the run; see the class docstring for what is raised.

        ``follow``: a run that ends ``WAITING`` on the fleet (a timer...) is followed into the
        continuation that goes on with it, to the end of the chain (see
        :mod:`tether.producer.follow`); ``timeout`` covers the whole chain.
        """
        if follow:
            return await (await self.follow_to_end(timeout)).result(timeout=None)
        return outcome(await self.run_result(timeout))

    async def follow_to_end(self, timeout: float | None = None) -> AsyncRunHandle:
        """The handle of the last run of this run's chain (the run, then each continuation the
        fleet goes on with after a pause: see :mod:`tether.producer.follow`), once it has
        finished.

        Raises:
            TimeoutError: the chain did not finish within ``timeout`` seconds (it goes on).
        """
        deadline, handle = Deadline(timeout), self
        while True:
            result = await handle.run_result(timeout=deadline.left())
            next_id, tenant = next_run_id(result), result.tenant
            if next_id is None:
                return handle
            while await self._producer.locate(next_id, tenant=tenant) is None:
                await asyncio.sleep(deadline.pause())  # the wake is not submitted yet
            handle = self._producer.handle(next_id, tenant=tenant)

    async def exception(self, timeout: float | None = None) -> BaseException | None:
        """The run's error (None when it succeeded); raises CancelledError when cancelled."""
        try:
            await self.result(timeout)
        except TimeoutError:
            raise
        except Exception as exc:
            if is_cancelled(self._settled_result()):
                raise
            return exc
        return None

    def __await__(self) -> Generator[Any, None, RunResult]:
        """``await handle`` waits for the run without blocking the event loop.

        It is ``await handle.result()``.
        """
        return self.result().__await__()

    async def cancel(self) -> bool:
        """Cancel the run if it has not started (like :meth:`concurrent.futures.Future.cancel`).

        True when it was still queued (it will never start, and the handle is cancelled at
        once); a running run is asked to stop at its next step boundary, and this answers False
        (see :meth:`AsyncProducer.cancel`).
        """
        if self.done():
            return never_started(self._settled_result())
        if await self._producer.cancel(self.run_id) is not CancelOutcome.CANCELLED:
            return False
        settled = await self._ensure()
        if not settled.done():
            settled.set_result(cancelled_before_start(self._ids))
        return True

    # --- live events ---------------------------------------------------------------------------

    async def events(self, *, idle_timeout_s: float | None = 60.0) -> AsyncIterator[AgentEvent]:
        """This run's events, live, until the run has ended and all its events were seen.

        Events come from the session's stream; other runs' events are skipped. Stops after
        ``idle_timeout_s`` without any event while the run is still unfinished (None: never).
        """
        await self.load()
        tenant, session_id = self.tenant, self.session_id
        if tenant is None or session_id is None:
            return
        settled = await self._ensure()
        follow = RunFollow(self.run_id)
        while True:
            async for event in self._producer.event_stream.tail(
                tenant, session_id, after_seq=follow.last_seq, block_ms=200, idle_timeout_s=0.3
            ):
                if follow.event(event):
                    yield event
            if follow.over(_final(settled), idle_timeout_s):
                return

    async def stream(
        self, *, idle_timeout_s: float | None = 60.0, follow: bool = False
    ) -> AsyncIterator[AgentEvent | LiveDelta | RunResult]:
        """This run live, events and pieces in order, ending with its :class:`RunResult`
        whatever the status (see ``RunHandle.stream``, and its ``follow``)."""
        if follow:
            async for item in self._stream_followed(idle_timeout_s):
                yield item
            return
        await self.load()
        tenant, session_id = self.tenant, self.session_id
        if tenant is None or session_id is None:
            return
        settled = await self._ensure()
        follow_run = RunFollow(self.run_id)
        while True:
            async for item in self._producer.live.follow(
                tenant,
                session_id,
                after_seq=follow_run.last_seq,
                block_ms=STREAM_BLOCK_MS,
                idle_timeout_s=idle_timeout_s,
                stop=lambda: follow_run.stops(_final(settled)),
                on_end=follow_run.end,
                whole_steps=True,
            ):
                if follow_run.item(item):
                    yield item
            if follow_run.ended:  # finished: the listener settles the future from the same commit
                await asyncio.wait([settled], timeout=END_WAIT_S)
            if not follow_run.again(_final(settled)):
                break
        final = _final(settled)
        if final is not None:
            yield self._ids.complete(final)

    async def _stream_followed(
        self, idle_timeout_s: float | None
    ) -> AsyncIterator[AgentEvent | LiveDelta | RunResult]:
        handle: AsyncRunHandle = self
        while True:
            final: RunResult | None = None
            async for item in handle.stream(idle_timeout_s=idle_timeout_s):
                final = item if isinstance(item, RunResult) else final
                yield item
            next_id = next_run_id(final) if final is not None else None
            if final is None or next_id is None:
                return
            deadline = Deadline(idle_timeout_s)
            try:
                while await self._producer.locate(next_id, tenant=final.tenant) is None:
                    await asyncio.sleep(deadline.pause())
            except TimeoutError:
                return  # idle too long: the stream ends, as an idle run's does
            handle = self._producer.handle(next_id, tenant=final.tenant)


def _final(settled: asyncio.Future[RunResult]) -> RunResult | None:
    """The run's result once the handle is settled, else None (no wait)."""
    return settled.result() if settled.done() else None


def _retrieved(task: asyncio.Future[None]) -> None:
    """Mark a registration's failure as seen (the waits that awaited it raised it; one whose
    waiter was cancelled meanwhile would log "exception was never retrieved")."""
    if not task.cancelled():
        task.exception()
