"""AsyncProducer: the asyncio client of a Tether deployment.

>>> async with AsyncProducer() as producer:              # settings from TETHER_* variables
...     result = await producer.run("s-1", "remember milk", agent="notes")
...     handle = await producer.run_async("s-1", "recall", agent="notes")
...     print((await handle).output)
...     async for event in producer.tail("s-1", idle_timeout_s=1):
...         print(event.seq, event.type)

Same methods and behaviour as :class:`~tether.producer.client.Producer`, through the same core
(:mod:`tether.producer.submission`): Redis I/O is ``redis.asyncio``, completions come from one
asyncio
task per producer, and no call makes a thread. Celery has no asyncio client, so run messages are
published by one daemon thread per producer (:class:`~tether.producer.publish.BackgroundPublisher`);
submissions made in the same event-loop turn (``asyncio.gather`` over many runs) share one Redis
round trip and one publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterable
from typing import Any, Unpack

from celery import Celery

from tether.core.events import AgentEvent
from tether.core.results import Resolution
from tether.errors import TetherError
from tether.ids import new_id, validate_tenant
from tether.keys import RedisKeys
from tether.persistence.deltas.live import LiveItem
from tether.persistence.deltas.live_redis_aio import AsyncLiveFeed
from tether.persistence.redis_conn import redact_url
from tether.persistence.redis_conn_aio import async_redis_from_url
from tether.persistence.streams.redis_aio import AsyncEventTail
from tether.producer import submission
from tether.producer.aio_batch import TurnBatcher
from tether.producer.aio_handle import AsyncRunHandle
from tether.producer.listener import AsyncCompletionListener
from tether.producer.publish import BackgroundPublisher, build_celery_app
from tether.producer.submission import RunSpec, Submitted
from tether.runs.contract import RunRef, RunResult, WireRequest
from tether.runs.options import RunOptionsKwargs
from tether.runs.queue.base import CancelOutcome
from tether.runs.queue.redis.aio import AsyncRunQueue
from tether.runs.usage.base import exceeded, utc_day
from tether.runs.usage.policy import budgeted
from tether.runs.usage.redis import AsyncTenantAdmission
from tether.settings import Settings, load_settings

#: Calls whose requests are validated between two yields to the event loop.
BUILD_CHUNK = 25


class AsyncProducer:
    """Client of a Tether deployment for asyncio code (one per event loop).

    Args:
        settings: settings (default: read from the environment).
        celery_app: an existing Celery app to publish with (default: one built from settings).
        **overrides: setting overrides, e.g. ``broker_url=...``, ``redis_url=...``.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        celery_app: Celery | None = None,
        **overrides: Any,
    ) -> None:
        self.settings = settings or load_settings(**overrides)
        self.keys = RedisKeys(self.settings.namespace)
        url = self.settings.effective_redis_url
        self.redis = async_redis_from_url(url)
        where = redact_url(url)
        self.runs = AsyncRunQueue(
            self.redis, self.keys, result_ttl_s=self.settings.result_ttl_s, where=where
        )
        self.admission = AsyncTenantAdmission(self.redis, self.keys, where=where)
        #: The sessions' live event streams (was ``stream`` before :meth:`stream`).
        self.event_stream = AsyncEventTail(self.redis, self.keys, where=where)
        self.live = AsyncLiveFeed(self.redis, self.keys, where=where)
        self._celery = celery_app
        self._celery_lock = threading.Lock()  # built on the publisher thread
        self._publisher = BackgroundPublisher(lambda: self.celery)
        self._submits: TurnBatcher[list[RunSpec], list[Submitted] | Exception] = TurnBatcher(
            self._flush
        )
        #: One completion listener per tenant this producer submitted to (see listener_for).
        self._listeners: dict[str, AsyncCompletionListener] = {}
        #: This producer's completion feed: workers announce its runs there (RunRequest.reply_to)
        self.producer_id = new_id("p")
        self.feed = self.keys.feed(self.settings.tenant, self.producer_id)

    # --- plumbing ----------------------------------------------------------------------------

    @property
    def celery(self) -> Celery:
        """The Celery app used to publish (built on first use)."""
        with self._celery_lock:
            if self._celery is None:
                self._celery = build_celery_app(self.settings)
            return self._celery

    @property
    def listener(self) -> AsyncCompletionListener:
        """The completion listener of this producer's own tenant (``settings.tenant``)."""
        return self.listener_for(self.settings.tenant)

    def listener_for(self, tenant: str) -> AsyncCompletionListener:
        """The completion listener of ``tenant``'s runs: workers announce a run on its own
        tenant's feed, so a producer submitting to several tenants reads one feed each."""
        listener = self._listeners.get(tenant)
        if listener is None:
            feed = self.keys.feed(tenant, self.producer_id)
            listener = self._listeners[tenant] = AsyncCompletionListener(self.runs, feed=feed)
        return listener

    async def aclose(self) -> None:
        """Stop the listeners and the publisher, and close connections."""
        for tenant, listener in self._listeners.items():
            await listener.close()
            with contextlib.suppress(TetherError):  # it expires on its own otherwise
                await self.runs.close_feed(self.keys.feed(tenant, self.producer_id))
        self._publisher.close(timeout_s=0.0)  # every submit awaited its publish: nothing waits
        await self.redis.aclose()

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- submitting ----------------------------------------------------------------------------

    async def _flush(self, calls: list[list[RunSpec]]) -> list[list[Submitted] | Exception]:
        """Build the requests of concurrent ``submit_many`` calls, then submit the valid ones
        together; per call, its submissions or why it was refused (nothing of it is queued)."""
        built: list[list[WireRequest] | Exception] = []
        for n, specs in enumerate(calls, start=1):
            try:
                wires = submission.build_requests(self.settings, specs, self.producer_id)
                await self._admit(wires)
                built.append(wires)
            except Exception as exc:  # this call's own error; the others go on
                built.append(exc)
            if n % BUILD_CHUNK == 0:
                await asyncio.sleep(0)  # validating hundreds of requests must not hold the loop
        valid = [r for requests in built if not isinstance(requests, Exception) for r in requests]
        submitted = await self._submit_requests(valid) if valid else []
        answers: list[list[Submitted] | Exception] = []
        start = 0
        for requests in built:
            if isinstance(requests, Exception):
                answers.append(requests)
            else:
                answers.append(submitted[start : start + len(requests)])
                start += len(requests)
        return answers

    async def _admit(self, requests: list[WireRequest]) -> None:
        """Refuse the requests when a tenant among them is over its budget (no Redis command
        for tenants without one; see :func:`tether.runs.usage.policy.admit_submission`)."""
        for tenant, budget, runs in budgeted(self.settings, [w.request for w in requests]):
            verdict = await self.admission.admit(tenant, budget, runs=runs)
            if not verdict.admitted:
                raise exceeded(tenant, budget, verdict, utc_day())

    async def _submit_requests(self, requests: list[WireRequest]) -> list[Submitted]:
        """Submit, preempt, publish, record refusals: what ``Producer.submit_many`` does."""
        with submission.acting_for(self.settings, (w.request.tenant for w in requests)):
            outcomes = await self.runs.submit_many(requests, queue=self.settings.queue)
        submitted = submission.plan_submission(requests, outcomes)
        for item in submitted:
            mode = item.stop_mode
            if mode is not None:
                r = item.request
                await self.runs.preempt(r.tenant, r.session_id, item.run_id, mode)
        await self._publisher.publish(
            [
                submission.run_message(
                    s.wire, self.settings.queue, wake_only=self.settings.registered_runs_only
                )
                for s in submitted
                if s.queued
            ]
        )
        for item in submitted:
            if item.rejection is not None:
                await self.runs.record_rejected(item.rejection)
        return submitted

    def _handle_for(self, submitted: Submitted) -> AsyncRunHandle:
        r = submitted.request
        return AsyncRunHandle(
            self,
            submitted.run_id,
            request_id=r.request_id,
            session_id=r.session_id,
            tenant=r.tenant,
        )

    async def submit_many(self, specs: Iterable[RunSpec]) -> list[AsyncRunHandle]:
        """Enqueue many runs (one Redis round trip and one publish with concurrent callers).

        Raises:
            InvalidInput: a malformed id, oversized input, or bad option (nothing is enqueued).
        """
        specs = list(specs)
        if not specs:
            return []
        answer = (await self._submits.submit([specs]))[0]
        if isinstance(answer, Exception):
            raise answer
        return [self._handle_for(s) for s in answer]

    async def run_async(
        self, session_id: str, input: str | None, **options: Unpack[RunOptionsKwargs]
    ) -> AsyncRunHandle:
        """Enqueue a run; returns its handle once it is queued (see ``Producer.run_async``)."""
        return (await self.submit_many([submission.run_spec(session_id, input, **options)]))[0]

    submit = run_async

    async def run(
        self,
        session_id: str,
        input: str | None,
        *,
        wait_s: float | None = None,
        **options: Unpack[RunOptionsKwargs],
    ) -> RunResult:
        """Enqueue a run and wait for its result (see :meth:`AsyncRunHandle.result`)."""
        handle = await self.run_async(session_id, input, **options)
        return await handle.result(timeout=wait_s)

    # --- human in the loop ---------------------------------------------------------------------

    async def resolve(
        self,
        session_id: str,
        resolutions: Iterable[Resolution],
        **options: Unpack[RunOptionsKwargs],
    ) -> AsyncRunHandle:
        """Continue the session's ``WAITING`` run (see ``Producer.resolve``)."""
        spec = submission.resolution_spec(session_id, resolutions, **options)
        return (await self.submit_many([spec]))[0]

    async def approve(
        self, session_id: str, call_id: str, *, agent: str, tenant: str | None = None
    ) -> AsyncRunHandle:
        """Approve a pending call: the tool runs, then the run goes on."""
        return await self.resolve(
            session_id, [submission.approval(call_id)], agent=agent, tenant=tenant
        )

    async def reject(
        self,
        session_id: str,
        call_id: str,
        reason: str = "rejected by a person",
        *,
        agent: str,
        tenant: str | None = None,
    ) -> AsyncRunHandle:
        """Refuse a pending call: the model sees ``reason``, then the run goes on."""
        resolution = submission.rejection(call_id, reason)
        return await self.resolve(session_id, [resolution], agent=agent, tenant=tenant)

    async def submit_tool_output(
        self, session_id: str, call_id: str, output: str, *, agent: str, tenant: str | None = None
    ) -> AsyncRunHandle:
        """Give the output of a call that waits for one, then the run goes on."""
        resolution = submission.tool_output(call_id, output)
        return await self.resolve(session_id, [resolution], agent=agent, tenant=tenant)

    # --- following runs ------------------------------------------------------------------------

    async def locate(self, run_id: str, *, tenant: str | None = None) -> RunRef | None:
        """Where run ``run_id`` of ``tenant`` (default: this producer's) lives, or None."""
        scope = validate_tenant(tenant or self.settings.tenant)
        with submission.acting_for(self.settings, [scope]):
            return await self.runs.locate(scope, submission.run_id_arg(run_id))

    def handle(self, run_id: str, *, tenant: str | None = None) -> AsyncRunHandle:
        """A handle on an existing run of ``tenant`` (default: this producer's); does no I/O.
        Another tenant's run settles with :class:`RunNotFound`."""
        scope = validate_tenant(tenant or self.settings.tenant)
        return AsyncRunHandle(self, submission.run_id_arg(run_id), tenant=scope)

    async def cancel(self, run_id: str, *, tenant: str | None = None) -> CancelOutcome:
        """Ask a run to stop (see ``Producer.cancel``); another tenant's run is not found."""
        ref = await self.locate(run_id, tenant=tenant)
        if ref is None:
            return CancelOutcome.UNKNOWN  # another tenant's run is not found: nothing changes
        return await self.runs.request_cancel(ref)

    def tail(
        self,
        session_id: str,
        tenant: str | None = None,
        after_seq: int = 0,
        *,
        idle_timeout_s: float | None = None,
    ) -> AsyncIterator[AgentEvent]:
        """Follow a session's live events: ``async for event in producer.tail(...)``."""
        tenant, session_id = submission.tail_target(self.settings, session_id, tenant)
        events = self.event_stream.tail(
            tenant, session_id, after_seq=after_seq, block_ms=1000, idle_timeout_s=idle_timeout_s
        )
        return submission.acting_for_each_async(self.settings, tenant, events)

    def stream(
        self,
        session_id: str,
        tenant: str | None = None,
        after_seq: int = 0,
        *,
        idle_timeout_s: float | None = None,
    ) -> AsyncIterator[LiveItem]:
        """Follow a session live, events and pieces in order: ``async for item in
        producer.stream(...)`` (see ``Producer.stream``)."""
        tenant, session_id = submission.tail_target(self.settings, session_id, tenant)
        items = self.live.follow(
            tenant, session_id, after_seq=after_seq, block_ms=1000, idle_timeout_s=idle_timeout_s
        )
        return submission.acting_for_each_async(self.settings, tenant, items)


__all__ = ["AsyncProducer", "AsyncRunHandle"]
