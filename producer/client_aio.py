"""AsyncProducer: the asyncio client (``redis.asyncio``), the twin of
:class:`~tether.producer.client.Producer`.

>>> async def main():
...     async with AsyncProducer() as producer:        # settings from TETHER_* variables
...         result = await producer.run("s-1", "remember milk", agent="notes")
...         handle = await producer.run_async("s-1", "recall", agent="notes")
...         print((await handle).output)
...         async for event in producer.tail("s-1", idle_timeout_s=1):
...             print(event.seq, event.type)

Same methods and behaviour as :class:`~tether.producer.client.Producer`, through the same core
(:mod:`tether.producer.submission`, :class:`~tether.producer.base.ProducerBase`;
``tests/test_twin_surfaces.py`` holds the two surfaces equal): Redis I/O is ``redis.asyncio``,
completions come from one asyncio task per producer and tenant, and no call makes a thread.
Celery has no asyncio client, so run messages are published by one daemon thread per producer
(:class:`~tether.producer.publish_aio.BackgroundPublisher`); submissions made in the same
event-loop turn (``asyncio.gather`` over many runs) share one Redis round trip and one publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any, Unpack

from celery import Celery

import tether.producer.submission as submission
from tether.core.events import AgentEvent, now_ms
from tether.core.results import Resolution
from tether.errors import TetherError
from tether.observability.tracing import current_trace_context, traced_async
from tether.persistence.deltas.live import LiveItem
from tether.persistence.deltas.live_redis_aio import AsyncRedisLiveFeed
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.persistence.redis_conn_aio import async_redis_from_url
from tether.persistence.streams.redis_aio import AsyncRedisEventStream
from tether.producer.base import ProducerBase
from tether.producer.batcher_aio import TurnBatcher
from tether.producer.handle_aio import AsyncRunHandle
from tether.producer.listener_aio import AsyncCompletionListener
from tether.producer.publish_aio import BackgroundPublisher
from tether.producer.signals import SignalReceipt, receipt, signal_plan, signal_wake
from tether.producer.submission import RunSpec, Submitted, TraceContext
from tether.producer.waits import (
    WokenCall,
    by_queue,
    cancel_requests,
    supersede_plan,
    superseding,
    wake_keys,
    wake_plan,
    wake_target,
    woken,
)
from tether.producer.worker_watch import split_wait
from tether.producer.worker_watch_aio import async_watch_for_workers
from tether.runs.contract import RunRef, RunResult, WireRequest
from tether.runs.options import RunOptionsKwargs
from tether.runs.queue.base import CancelOutcome, RunView, SubmitState
from tether.runs.queue.redis_aio import AsyncRedisRunQueue
from tether.runs.signals.redis import async_send
from tether.runs.usage.redis_aio import AsyncRedisTenantAdmission
from tether.settings import Settings

#: Calls whose requests are validated between two yields to the event loop.
BUILD_CHUNK = 25
#: One ``submit_many`` call as the batcher gets it: its specs and its caller's trace context.
_Call = tuple[list[RunSpec], TraceContext | None]


class AsyncProducer(ProducerBase[AsyncRunHandle, AsyncCompletionListener]):
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
        super().__init__(settings, celery_app, overrides)
        self.redis = async_redis_from_url(self.settings.effective_redis_url)
        self.runs = AsyncRedisRunQueue(
            self.redis, self.keys, result_ttl_s=self.settings.result_ttl_s
        )
        self.admission = AsyncRedisTenantAdmission(self.redis, self.keys)
        #: The sessions' live event streams (was ``stream`` before :meth:`stream`).
        self.event_stream = AsyncRedisEventStream(self.redis, keys=self.keys)
        self.live = AsyncRedisLiveFeed(self.redis, keys=self.keys)
        self._publisher = BackgroundPublisher(lambda: self.celery)  # builds it on its thread
        self._submits: TurnBatcher[_Call, list[Submitted] | Exception] = TurnBatcher(self._flush)
        self._trust_checked = False

    def _new_handle(
        self,
        run_id: str,
        *,
        request_id: str | None = None,
        session_id: str | None = None,
        tenant: str | None = None,
        queued_after: float | None = None,
    ) -> AsyncRunHandle:
        return AsyncRunHandle(
            self,
            run_id,
            request_id=request_id,
            session_id=session_id,
            tenant=tenant,
            queued_after=queued_after,
        )

    def _new_listener(self, feed: str) -> AsyncCompletionListener:
        return AsyncCompletionListener(self.runs, feed=feed)

    async def aclose(self) -> None:
        """Stop the listeners and close connections.

        The publisher's thread stops too (every submit awaited its publish: nothing waits).
        """
        for listener, feed in self._feeds():
            await listener.aclose()
            with contextlib.suppress(TetherError):  # it expires on its own otherwise
                await self.runs.close_feed(feed)
        self._publisher.close(timeout_s=0.0)  # every submit awaited its publish: nothing waits
        await self.redis.aclose()

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- submitting ----------------------------------------------------------------------------

    @traced_async("tether.submit")
    async def submit_many(self, specs: Iterable[RunSpec]) -> list[AsyncRunHandle]:
        """Enqueue many runs with one Redis round trip and one broker connection.

        Concurrent callers (``asyncio.gather``) share that round trip and that publish; each
        caller's requests carry its own trace context and are refused or queued on their own.

        Raises:
            InvalidInput: a malformed id, oversized input, or bad option (nothing is enqueued).
            BudgetExceeded: a tenant among the runs is over its budget (nothing is enqueued).
        """
        specs = list(specs)
        if not specs:
            return []
        if not self._trust_checked:  # as Producer's constructor does (it cannot await)
            if not self.settings.registered_runs_only:
                with translate_errors(describe_client(self.redis)):
                    submission.refuse_trusting(self.settings, await self.runs.restricted())
            self._trust_checked = True
        queued_after = time.monotonic()
        answer = (await self._submits.submit([(specs, current_trace_context())]))[0]
        if isinstance(answer, Exception):
            raise answer
        return [self._handle_for(item, queued_after) for item in answer]

    async def _flush(self, calls: list[_Call]) -> list[list[Submitted] | Exception]:
        """Build the requests of concurrent ``submit_many`` calls, then submit the valid ones
        together; per call, its submissions or why it was refused (nothing of it is queued)."""
        built: list[list[WireRequest] | Exception] = []
        for n, (specs, trace) in enumerate(calls, start=1):
            try:
                wires = submission.build_requests(
                    self.settings, specs, self.producer_id, trace=trace
                )
                await self._admit(wires)
                built.append(wires)
            except Exception as exc:  # this call's own error; the others go on
                built.append(exc)
            if n % BUILD_CHUNK == 0:
                await asyncio.sleep(0)  # validating hundreds of requests must not hold the loop
        valid = [r for requests in built if not isinstance(requests, Exception) for r in requests]
        submitted = await self._submit(valid) if valid else []
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
        """Refuse the requests when a tenant among them is over its budget."""
        for tenant, budget, runs in submission.budget_checks(self.settings, requests):
            verdict = await self.admission.admit(tenant, budget, runs=runs)
            submission.check_verdict(tenant, budget, verdict)

    async def _submit(
        self, requests: list[WireRequest], queue: str | None = None
    ) -> list[Submitted]:
        """Submit, preempt, publish, record refusals (see :mod:`~tether.producer.submission`),
        on ``queue`` (default: the settings')."""
        await self._supersede_parked(requests)
        with submission.acting_for(self.settings, (w.request.tenant for w in requests)):
            outcomes = await self.runs.submit_many(requests, queue=queue or self.settings.queue)
        submitted = submission.plan_submission(requests, outcomes)
        for preemption in submission.preemptions(submitted):
            await self.runs.preempt(*preemption)
        await self._publisher.publish(submission.run_messages(self.settings, submitted, queue))
        for rejection in submission.rejections(submitted):
            await self.runs.record_rejected(rejection)
        return submitted

    async def run_async(
        self, session_id: str, input: str | None, **options: Unpack[RunOptionsKwargs]
    ) -> AsyncRunHandle:
        """Enqueue a run; returns its handle once it is queued. ``options``: the run's
        :class:`~tether.runs.options.RunOptions` (``agent`` is required).

        As ``Producer.run_async``: a ``request_id`` submitted before answers with a handle on
        the original run.

        Raises:
            InvalidInput: a malformed id, oversized input, or bad option (nothing is enqueued).
            TypeError: a keyword that is no run option.
        """
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
        """Enqueue a run and wait for its result, at most ``wait_s`` (see
        :meth:`AsyncRunHandle.result`); ``options`` as for :meth:`run_async`. While it waits, a
        run that stays queued with no live worker for its queue is warned about, once
        (:mod:`~tether.producer.worker_watch_aio`)."""
        handle = await self.run_async(session_id, input, **options)
        grace_s, rest_s = split_wait(wait_s)
        try:
            return await handle.result(timeout=grace_s)
        except TimeoutError:
            if rest_s is not None and rest_s <= 0:
                raise
        async with async_watch_for_workers(self, handle.run_id, grace_s=0):
            return await handle.result(timeout=rest_s)

    async def register_message(self, request: Any) -> AsyncRunHandle:
        """Register the request of a ``tether.run`` message you build and publish yourself (its
        ``request`` argument: JSON text or an object), as ``Producer.register_message`` does.
        Returns the run's handle."""
        wire = submission.hand_made(self.settings, request)
        with submission.acting_for(self.settings, [wire.request.tenant]):
            outcomes = await self.runs.submit_many([wire], queue=self.settings.queue)
        queued_after = time.monotonic()
        return self._handle_for(submission.plan_submission([wire], outcomes)[0], queued_after)

    async def resubmit(self, run_id: str) -> None:
        """Publish the stored request of ``run_id`` again (harmless: it is idempotent).

        Raises:
            InvalidInput: the run is unknown or expired.
        """
        wire = submission.stored_request(run_id, await self.record(run_id))
        await self._publisher.publish([self._message(wire)])

    # --- human in the loop ---------------------------------------------------------------------

    async def resolve(
        self,
        session_id: str,
        resolutions: Iterable[Resolution],
        **options: Unpack[RunOptionsKwargs],
    ) -> AsyncRunHandle:
        """Continue the session's ``WAITING`` run, from any process: settle its pending calls
        (see :class:`~tether.core.results.Resolution`), then run on with ``options`` (see
        ``Producer.resolve``). Returns the continuation's handle.
        """
        spec = submission.resolution_spec(session_id, resolutions, **options)
        return (await self.submit_many([spec]))[0]

    async def approve(
        self, session_id: str, call_id: str, *, agent: str, tenant: str | None = None
    ) -> AsyncRunHandle:
        """Approve a pending call: the tool runs, then the run goes on."""
        resolution = submission.approval(call_id)
        return await self.resolve(session_id, [resolution], agent=agent, tenant=tenant)

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
        """Where run ``run_id`` of ``tenant`` (default: this producer's) lives, or None when
        that tenant has no such run (one read of the tenant's run index)."""
        scope = self._scope(tenant)
        with submission.acting_for(self.settings, [scope]):
            return await self.runs.locate(scope, submission.run_id_arg(run_id))

    async def record(self, run_id: str, *, tenant: str | None = None) -> RunView | None:
        """The record of run ``run_id`` of ``tenant`` (default: this producer's), or None."""
        ref = await self.locate(run_id, tenant=tenant)
        return await self.runs.get(ref) if ref is not None else None

    async def signal(
        self, session_id: str, name: str, payload: object = None, *, tenant: str | None = None
    ) -> SignalReceipt:
        """Send signal ``name`` with ``payload`` (any JSON value) to a session: the first
        ``ctx.wait_for_signal(name)`` of its runs that has not had it takes it, in send order,
        once; a call parked on it now is woken (its wake is submitted here). A signal nobody
        waits for is kept in the session's mailbox until one does.

        Raises:
            InvalidInput: a malformed id or name, a payload that is not JSON, or one over
                ``TETHER_MAX_INPUT_BYTES`` (nothing is sent).
            PermissionDenied: this credential may not act for ``tenant`` (with per-tenant Redis
                users, another tenant's session): nothing is written.
        """
        plan = signal_plan(self.settings, session_id, name, payload, tenant)
        with submission.acting_for(self.settings, [plan.tenant]):
            sent = await async_send(self.redis, self.keys, *plan[:4], sent_at_ms=plan.sent_at_ms)
        wakes = signal_wake(sent, plan)
        if wakes:
            await self._submit(wakes)
        return receipt(sent, wakes)

    async def _supersede_parked(self, requests: list[WireRequest]) -> None:
        """Settle the calls parked on the fleet of each session a request supersedes
        (``on_busy`` interrupt or rollback), ahead of it in the session's queue
        (:func:`~tether.producer.waits.supersede_plan`): one round trip, only for those."""
        newer = superseding(requests)
        if not newer:
            return
        with (
            submission.acting_for(self.settings, (r.tenant for r in newer)),
            translate_errors(describe_client(self.redis)),
        ):
            pipe = self.redis.pipeline(transaction=False)
            for r in newer:
                pipe.hvals(self.keys.session_waits(r.tenant, r.session_id))
            replies = await pipe.execute()
        for request, raw in zip(newer, replies, strict=True):
            for queue, wires in by_queue(supersede_plan(request, raw), self.settings.queue).items():
                await self._submit(wires, queue)

    async def wake(
        self, session_id: str, call_id: str | None = None, *, tenant: str | None = None
    ) -> list[WokenCall]:
        """Wake the session's calls parked on the fleet now (only ``call_id`` when given): what
        the fleet does at their wake time (a timer is due; a signal's or children's wait times
        out, with the tool result a timeout gives), with the same ids as the fleet's own wake,
        so it is applied once whoever submits it first (see docs/waiting.md).

        Raises:
            InvalidInput: a malformed id, or nothing of the session waits on the fleet (or not
                ``call_id``): nothing is submitted.
            PermissionDenied: this credential may not act for ``tenant`` (with per-tenant Redis
                users, another tenant's session): nothing is written.
        """
        target = wake_target(self.settings, session_id, call_id, tenant)
        waits, family = wake_keys(self.keys, target)
        with (
            submission.acting_for(self.settings, [target.tenant]),
            translate_errors(describe_client(self.redis)),
        ):
            pipe = self.redis.pipeline(transaction=False)
            pipe.hvals(waits)
            pipe.hgetall(family)
            raw_records, raw_family = await pipe.execute()
        plan = wake_plan(target, raw_records, raw_family, now_ms())
        submitted: list[Submitted] = []
        for queue, wires in by_queue(plan, self.settings.queue).items():
            submitted += await self._submit(wires, queue)
        return woken(plan, submitted)

    async def cancel(self, run_id: str, *, tenant: str | None = None) -> CancelOutcome:
        """Ask a run to stop. ``CANCELLED``: it was queued and will never start. ``REQUESTED``:
        it is running and stops at its next step boundary, unless it finishes first. ``FINISHED``
        or ``UNKNOWN``: nothing changed (another tenant's run is ``UNKNOWN``)."""
        ref = await self.locate(run_id, tenant=tenant)
        if ref is None:
            return CancelOutcome.UNKNOWN  # another tenant's run is not found: nothing changes
        outcome = await self.runs.request_cancel(ref)
        if outcome is not CancelOutcome.FINISHED:
            return outcome
        cancels = cancel_requests(await self.runs.get(ref), self.producer_id)
        if not cancels:
            return outcome
        # parked on the fleet: a continuation cancels its calls (or the wake already queued)
        for item in await self._submit([WireRequest.of(r) for r in cancels]):
            if item.outcome.state is SubmitState.DUPLICATE:
                await self.runs.request_cancel(ref._replace(run_id=item.run_id))
        return CancelOutcome.REQUESTED

    def tail(
        self,
        session_id: str,
        tenant: str | None = None,
        after_seq: int = 0,
        *,
        idle_timeout_s: float | None = None,
    ) -> AsyncIterator[AgentEvent]:
        """Follow a session's live events (resume with the last seen ``seq``).

        ``async for event in producer.tail(...)``.
        """
        tenant, session_id = submission.tail_target(self.settings, session_id, tenant)
        events = self.event_stream.tail(
            tenant, session_id, after_seq=after_seq, block_ms=1000, idle_timeout_s=idle_timeout_s
        )
        return submission.async_acting_for_each(self.settings, tenant, events)

    def stream(
        self,
        session_id: str,
        tenant: str | None = None,
        after_seq: int = 0,
        *,
        idle_timeout_s: float | None = None,
    ) -> AsyncIterator[LiveItem]:
        """Follow a session live: its committed events (an :class:`AgentEvent` each, as
        :meth:`tail`) and, while a worker streams a model's answer, its pieces, in order
        (``async for item in producer.stream(...)``; see ``Producer.stream``)."""
        tenant, session_id = submission.tail_target(self.settings, session_id, tenant)
        items = self.live.follow(
            tenant, session_id, after_seq=after_seq, block_ms=1000, idle_timeout_s=idle_timeout_s
        )
        return submission.async_acting_for_each(self.settings, tenant, items)


__all__ = ["AsyncProducer", "AsyncRunHandle"]
