"""RunHandle: a future-like, awaitable handle on a distributed run.

A handle is cheap: building one does no I/O. The first blocking call (or ``await``, or
``add_done_callback``) registers it with its producer's single completion listener, which
resolves every handle of that producer from one ``XREAD`` loop (no thread per handle, no polling).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

from tether.core.events import AgentEvent
from tether.core.results import RunStatus
from tether.runs.contract import RunResult
from tether.runs.queue.base import CancelOutcome

if TYPE_CHECKING:
    from tether.producer.client import Producer


class RunHandle:
    """The handle of one run, with :class:`concurrent.futures.Future` semantics.

    ``result()`` returns the :class:`RunResult` of a run that completed (also ``WAITING`` or
    ``CONTINUATION_REQUIRED``), raises the recorded error (a :class:`TetherError` subclass whose
    ``.result`` is the RunResult) for a failed run, and raises
    :class:`concurrent.futures.CancelledError` for a cancelled one.
    """

    def __init__(
        self,
        producer: Producer,
        run_id: str,
        *,
        request_id: str | None = None,
        session_id: str | None = None,
        tenant: str | None = None,
        future: concurrent.futures.Future[RunResult] | None = None,
    ) -> None:
        self._producer = producer
        self.run_id = run_id
        self._request_id = request_id
        self._session_id = session_id
        self._tenant = tenant
        self._future: concurrent.futures.Future[RunResult] = future or concurrent.futures.Future()
        self._registered = future is not None and future.done()

    def __repr__(self) -> str:
        state = "done" if self._future.done() else "pending"
        return f"<RunHandle {self.run_id} {state}>"

    # --- identity (loaded lazily for handles reattached by run id) ---------------------------

    def _load_ids(self) -> None:
        if self._session_id is None:
            view = self._producer.runs.get(self.run_id)
            if view is not None:
                self._request_id = view.request_id
                self._session_id = view.session_id
                self._tenant = view.tenant

    @property
    def request_id(self) -> str | None:
        """The request id (idempotency key)."""
        self._load_ids()
        return self._request_id

    @property
    def session_id(self) -> str | None:
        """The session the run applies to."""
        self._load_ids()
        return self._session_id

    @property
    def tenant(self) -> str | None:
        """The session's tenant."""
        self._load_ids()
        return self._tenant

    # --- future protocol ---------------------------------------------------------------------

    def _ensure(self) -> concurrent.futures.Future[RunResult]:
        if not self._registered:
            self._registered = True
            self._producer.listener.register(self.run_id, self._settle)
        return self._future

    def _settle(self, result: RunResult) -> None:
        """Resolve the future from a recorded result (called by the listener, once)."""
        if self._future.done():
            return
        # a result made up by the listener (a lost run) carries no ids: fill in what we know
        known = {"request_id": self._request_id, "session_id": self._session_id,
                 "tenant": self._tenant}
        missing = {k: v for k, v in known.items() if v and not getattr(result, k)}
        if missing:
            result = result.model_copy(update=missing)
        self._request_id = self._request_id or result.request_id
        self._session_id = self._session_id or result.session_id
        self._tenant = self._tenant or result.tenant
        if result.status is RunStatus.CANCELLED:
            self._future.set_result(result)
        elif result.status is RunStatus.FAILED:
            error = result.error()
            self._future.set_exception(error or RuntimeError(result.error_message))
        else:
            self._future.set_result(result)

    def run_result(self, timeout: float | None = None) -> RunResult:
        """The recorded :class:`RunResult` whatever the status (never raises the run's error)."""
        future = self._ensure()
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            raise
        except Exception as exc:
            recorded = getattr(exc, "result", None)
            if isinstance(recorded, RunResult):
                return recorded
            raise

    def result(self, timeout: float | None = None) -> RunResult:
        """Wait for the run; see the class docstring for what is raised."""
        result = self._ensure().result(timeout=timeout)
        if result.status is RunStatus.CANCELLED:
            raise concurrent.futures.CancelledError(f"run {self.run_id} was cancelled")
        return result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The run's error (None when it succeeded); CancelledError when cancelled."""
        future = self._ensure()
        exc = future.exception(timeout=timeout)
        if exc is None and future.result().status is RunStatus.CANCELLED:
            return concurrent.futures.CancelledError(f"run {self.run_id} was cancelled")
        return exc

    def done(self) -> bool:
        """True when the run finished (any terminal status)."""
        if self._future.done():
            return True
        self._ensure()
        return self._future.done()

    def running(self) -> bool:
        """True while a worker is executing the run."""
        if self._future.done():
            return False
        view = self._producer.runs.get(self.run_id)
        return view is not None and view.status == "RUNNING"

    def cancelled(self) -> bool:
        """True when the run ended cancelled."""
        return self.done() and self._future.result().status is RunStatus.CANCELLED

    def cancel(self) -> bool:
        """Cancel the run if it has not started, like :meth:`concurrent.futures.Future.cancel`.

        True only when the run was still queued: it will never start, and the handle resolves
        ``CANCELLED``. A running run is asked to stop at its next step boundary, but this answers
        False, because it may still finish (use :meth:`Producer.cancel` for the outcome).
        """
        if self._future.done():
            return False
        return self._producer.cancel(self.run_id) is CancelOutcome.CANCELLED

    def add_done_callback(self, fn: Callable[[RunHandle], Any]) -> None:
        """Call ``fn(handle)`` once the run finished (immediately when it already has)."""
        self._ensure().add_done_callback(lambda _f: fn(self))

    def __await__(self) -> Generator[Any, None, RunResult]:
        """``await handle`` waits without blocking the event loop."""
        wrapped = asyncio.wrap_future(self._ensure())
        result = yield from wrapped.__await__()
        if result.status is RunStatus.CANCELLED:
            raise concurrent.futures.CancelledError(f"run {self.run_id} was cancelled")
        return result

    # --- live events ---------------------------------------------------------------------------

    def events(self, *, idle_timeout_s: float | None = 60.0) -> Iterator[AgentEvent]:
        """Iterate this run's events live, until the run has ended and all its events were seen.

        Events come from the session's stream; other runs' events are skipped. Stops after
        ``idle_timeout_s`` without any event while the run is still unfinished (None: never).
        """
        tenant, session_id = self.tenant, self.session_id
        if tenant is None or session_id is None:
            return
        future = self._ensure()
        last_seq = 0
        idle_since = time.monotonic()
        while True:
            for event in self._producer.stream.tail(
                tenant, session_id, after_seq=last_seq, block_ms=200, idle_timeout_s=0.3
            ):
                last_seq = event.seq  # a replacement after a retried attempt may go back
                idle_since = time.monotonic()
                if event.run_id == self.run_id:
                    yield event
            if future.done():
                final = self.run_result()
                if final.last_seq == 0 or last_seq >= final.last_seq:
                    return
            elif idle_timeout_s is not None and time.monotonic() - idle_since > idle_timeout_s:
                return
