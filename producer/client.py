"""Producer: enqueue runs on sessions and get future-like handles back (blocking I/O; the
asyncio twin is :mod:`tether.producer.client_aio`, the logic both share
:mod:`tether.producer.submission` and :class:`~tether.producer.base.ProducerBase`).

>>> producer = Producer()                      # settings from TETHER_* variables
>>> result = producer.run("s-1", "remember milk", agent="notes")
>>> handle = producer.run_async("s-1", "recall", agent="notes")
>>> handle.result(timeout=30).output
'milk'
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from typing import Any, Unpack

from celery import Celery

import tether.producer.submission as submission
from tether.core.events import AgentEvent, now_ms
from tether.core.results import Resolution
from tether.errors import TetherError
from tether.observability.tracing import traced
from tether.persistence.deltas.live import LiveItem
from tether.persistence.deltas.live_redis import RedisLiveFeed
from tether.persistence.deltas.redis import RedisDeltaChannel
from tether.persistence.redis_conn import describe_client, redis_from_url, translate_errors
from tether.persistence.streams.redis import RedisEventStream
from tether.producer.base import ProducerBase
from tether.producer.handle import RunHandle
from tether.producer.listener import CompletionListener
from tether.producer.publish import publish_runs
from tether.producer.signals import SignalReceipt, receipt, signal_plan, signal_wake
from tether.producer.submission import RunSpec, Submitted
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
from tether.producer.worker_watch import split_wait, watch_for_workers
from tether.runs.contract import BusyPolicy, RunRef, RunResult, WireRequest
from tether.runs.options import RunOptionsKwargs
from tether.runs.queue.base import CancelOutcome, RunView, SubmitState
from tether.runs.queue.redis import RedisRunQueue
from tether.runs.signals.redis import RedisSignalMailbox
from tether.runs.usage.redis import RedisTenantAdmission
from tether.settings import Settings


class Producer(ProducerBase[RunHandle, CompletionListener]):
    """Client of a Tether deployment (thread-safe; one per process is enough).

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
        self.redis = redis_from_url(self.settings.effective_redis_url)
        self.runs = RedisRunQueue(self.redis, self.keys, result_ttl_s=self.settings.result_ttl_s)
        self.admission = RedisTenantAdmission(self.redis, self.keys)
        #: The sessions' live event streams (was ``stream`` before :meth:`stream` followed a
        #: session's pieces too).
        self.event_stream = RedisEventStream(self.redis, keys=self.keys)
        self.live = RedisLiveFeed(self.event_stream, RedisDeltaChannel(self.redis, self.keys))
        if not self.settings.registered_runs_only:  # one probe, only when the rule is off
            with translate_errors(describe_client(self.redis)):
                submission.refuse_trusting(self.settings, self.runs.restricted())

    def _new_handle(
        self,
        run_id: str,
        *,
        request_id: str | None = None,
        session_id: str | None = None,
        tenant: str | None = None,
        queued_after: float | None = None,
    ) -> RunHandle:
        return RunHandle(
            self,
            run_id,
            request_id=request_id,
            session_id=session_id,
            tenant=tenant,
            queued_after=queued_after,
        )

    def _new_listener(self, feed: str) -> CompletionListener:
        return CompletionListener(self.runs, feed=feed)

    def close(self) -> None:
        """Stop the listeners and close connections."""
        for listener, feed in self._feeds():
            listener.close()
            with contextlib.suppress(TetherError):  # it expires on its own otherwise
                self.runs.close_feed(feed)
        self.redis.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- submitting ----------------------------------------------------------------------------

    @traced("tether.submit")
    def submit_many(self, specs: Iterable[RunSpec]) -> list[RunHandle]:
        """Enqueue many runs with one Redis round trip and one broker connection.

        Each request is validated once and serialized once: the run record and the run message
        carry the same JSON text.

        Raises:
            InvalidInput: a malformed id, oversized input, or bad option (nothing is enqueued).
            BudgetExceeded: a tenant among the runs is over its budget (nothing is enqueued).
        """
        requests = submission.build_requests(self.settings, specs, self.producer_id)
        if not requests:
            return []
        for tenant, budget, runs in submission.budget_checks(self.settings, requests):
            verdict = self.admission.admit(tenant, budget, runs=runs)
            submission.check_verdict(tenant, budget, verdict)
        queued_after = time.monotonic()
        submitted = self._submit(requests)
        return [self._handle_for(item, queued_after) for item in submitted]

    def _submit(self, requests: list[WireRequest], queue: str | None = None) -> list[Submitted]:
        """Submit, preempt, publish, record refusals (see :mod:`~tether.producer.submission`),
        on ``queue`` (default: the settings')."""
        self._supersede_parked(requests)
        with submission.acting_for(self.settings, (w.request.tenant for w in requests)):
            outcomes = self.runs.submit_many(requests, queue=queue or self.settings.queue)
        submitted = submission.plan_submission(requests, outcomes)
        for preemption in submission.preemptions(submitted):
            self.runs.preempt(*preemption)
        publish_runs(self.celery, submission.run_messages(self.settings, submitted, queue))
        for rejection in submission.rejections(submitted):
            self.runs.record_rejected(rejection)
        return submitted

    def run_async(
        self, session_id: str, input: str | None, **options: Unpack[RunOptionsKwargs]
    ) -> RunHandle:
        """Enqueue a run; returns its handle once it is queued. ``options``: the run's
        :class:`~tether.runs.options.RunOptions` (``agent`` is required).

        Submitting a ``request_id`` that was already submitted returns a handle on the original
        run (the input is applied once). ``durability`` (``"step"`` or ``"run"``) overrides the
        agent's (see docs/long-runs.md).

        Raises:
            InvalidInput: a malformed id, oversized input, or bad option (nothing is enqueued).
            TypeError: a keyword that is no run option.
        """
        return self.submit_many([submission.run_spec(session_id, input, **options)])[0]

    def run(
        self,
        session_id: str,
        input: str | None,
        *,
        wait_s: float | None = None,
        **options: Unpack[RunOptionsKwargs],
    ) -> RunResult:
        """Enqueue a run and wait for its result, at most ``wait_s`` (see
        :meth:`RunHandle.result`); ``options`` as for :meth:`run_async`. While it waits, a
        run that stays queued with no live worker for its queue is warned about, once
        (:mod:`~tether.producer.worker_watch`)."""
        handle = self.run_async(session_id, input, **options)
        grace_s, rest_s = split_wait(wait_s)
        try:
            return handle.result(timeout=grace_s)
        except TimeoutError:
            if rest_s is not None and rest_s <= 0:
                raise
        with watch_for_workers(self, handle.run_id, grace_s=0):  # warns if no worker consumes
            return handle.result(timeout=rest_s)

    def register_message(self, request: Any) -> RunHandle:
        """Register the request of a ``tether.run`` message you build and publish yourself (its
        ``request`` argument: JSON text or an object) in its tenant's keyspace, so workers,
        which act only on registered runs (``TETHER_REGISTERED_RUNS_ONLY``), run it when the
        message arrives. Idempotent (by request id), like every submit; masked like every
        input. Returns the run's handle.

        Raises:
            InvalidInput: the request is malformed or its input oversized.
            PermissionDenied: the request names a tenant this credential may not act for.
        """
        wire = submission.hand_made(self.settings, request)
        with submission.acting_for(self.settings, [wire.request.tenant]):
            outcomes = self.runs.submit_many([wire], queue=self.settings.queue)
        queued_after = time.monotonic()
        return self._handle_for(submission.plan_submission([wire], outcomes)[0], queued_after)

    def resubmit(self, run_id: str) -> None:
        """Publish the stored request of ``run_id`` again (harmless: it is idempotent).

        Raises:
            InvalidInput: the run is unknown or expired.
        """
        wire = submission.stored_request(run_id, self.record(run_id))
        publish_runs(self.celery, [self._message(wire)])

    # --- human in the loop ---------------------------------------------------------------------

    def resolve(
        self,
        session_id: str,
        resolutions: Iterable[Resolution],
        **options: Unpack[RunOptionsKwargs],
    ) -> RunHandle:
        """Continue the session's ``WAITING`` run, from any process: settle its pending calls
        (see :class:`~tether.core.results.Resolution`), then run on with ``options`` (the
        continuation's :class:`~tether.runs.options.RunOptions`). Returns the continuation's
        handle (the waiting run's handle stays resolved with its ``WAITING`` result).

        Raises:
            InvalidInput: a malformed id or resolution (nothing is enqueued). A call id that is
                not pending fails the continuation run (``InvalidInput``); nothing changes.
        """
        return self.submit_many([submission.resolution_spec(session_id, resolutions, **options)])[0]

    def approve(
        self, session_id: str, call_id: str, *, agent: str, tenant: str | None = None
    ) -> RunHandle:
        """Approve a pending call: the tool runs, then the run goes on."""
        return self.resolve(session_id, [submission.approval(call_id)], agent=agent, tenant=tenant)

    def reject(
        self,
        session_id: str,
        call_id: str,
        reason: str = "rejected by a person",
        *,
        agent: str,
        tenant: str | None = None,
    ) -> RunHandle:
        """Refuse a pending call: the model sees ``reason``, then the run goes on."""
        resolution = submission.rejection(call_id, reason)
        return self.resolve(session_id, [resolution], agent=agent, tenant=tenant)

    def submit_tool_output(
        self, session_id: str, call_id: str, output: str, *, agent: str, tenant: str | None = None
    ) -> RunHandle:
        """Give the output of a call that waits for one, then the run goes on."""
        resolution = submission.tool_output(call_id, output)
        return self.resolve(session_id, [resolution], agent=agent, tenant=tenant)

    # --- following runs ------------------------------------------------------------------------

    def signal(
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
        mailbox = RedisSignalMailbox(self.redis, self.keys, where=describe_client(self.redis))
        with submission.acting_for(self.settings, [plan.tenant]):
            sent = mailbox.send(*plan[:4], sent_at_ms=plan.sent_at_ms)
        wakes = signal_wake(sent, plan)
        if wakes:
            self._submit(wakes)
        return receipt(sent, wakes)

    def _supersede_parked(self, requests: list[WireRequest]) -> None:
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
            replies = pipe.execute()
        for request, raw in zip(newer, replies, strict=True):
            for queue, wires in by_queue(supersede_plan(request, raw), self.settings.queue).items():
                self._submit(wires, queue)

    def wake(
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
            raw_records, raw_family = pipe.execute()
        plan = wake_plan(target, raw_records, raw_family, now_ms())
        submitted: list[Submitted] = []
        for queue, wires in by_queue(plan, self.settings.queue).items():
            submitted += self._submit(wires, queue)
        return woken(plan, submitted)

    def locate(self, run_id: str, *, tenant: str | None = None) -> RunRef | None:
        """Where run ``run_id`` of ``tenant`` (default: this producer's) lives, or None when
        that tenant has no such run (one read of the tenant's run index)."""
        scope = self._scope(tenant)
        with submission.acting_for(self.settings, [scope]):
            return self.runs.locate(scope, submission.run_id_arg(run_id))

    def record(self, run_id: str, *, tenant: str | None = None) -> RunView | None:
        """The record of run ``run_id`` of ``tenant`` (default: this producer's), or None."""
        ref = self.locate(run_id, tenant=tenant)
        return self.runs.get(ref) if ref is not None else None

    def cancel(self, run_id: str, *, tenant: str | None = None) -> CancelOutcome:
        """Ask a run to stop. ``CANCELLED``: it was queued and will never start. ``REQUESTED``:
        it is running and stops at its next step boundary, unless it finishes first (its events
        stay in the log, followed by a rollback: nothing of it stays in memory). ``FINISHED``
        or ``UNKNOWN``: nothing changed (another tenant's run is ``UNKNOWN``)."""
        ref = self.locate(run_id, tenant=tenant)
        if ref is None:
            return CancelOutcome.UNKNOWN  # another tenant's run is not found: nothing changes
        outcome = self.runs.request_cancel(ref)
        if outcome is not CancelOutcome.FINISHED:
            return outcome
        cancels = cancel_requests(self.runs.get(ref), self.producer_id)
        if not cancels:
            return outcome
        # parked on the fleet: a continuation cancels its calls (or the wake already queued)
        for item in self._submit([WireRequest.of(r) for r in cancels]):
            if item.outcome.state is SubmitState.DUPLICATE:
                self.runs.request_cancel(ref._replace(run_id=item.run_id))
        return CancelOutcome.REQUESTED

    def tail(
        self,
        session_id: str,
        tenant: str | None = None,
        after_seq: int = 0,
        *,
        idle_timeout_s: float | None = None,
    ) -> Iterator[AgentEvent]:
        """Follow a session's live events (resume with the last seen ``seq``)."""
        tenant, session_id = submission.tail_target(self.settings, session_id, tenant)
        events = self.event_stream.tail(
            tenant, session_id, after_seq=after_seq, block_ms=1000, idle_timeout_s=idle_timeout_s
        )
        return submission.acting_for_each(self.settings, tenant, events)

    def stream(
        self,
        session_id: str,
        tenant: str | None = None,
        after_seq: int = 0,
        *,
        idle_timeout_s: float | None = None,
    ) -> Iterator[LiveItem]:
        """Follow a session live: its committed events (an :class:`AgentEvent` each, as
        :meth:`tail`) and, while a worker streams a model's answer, its pieces (a
        :class:`~tether.persistence.deltas.base.LiveDelta` each), in order; attached mid-step,
        the step's pieces so far come first. See docs/streaming.md for the order and redos."""
        tenant, session_id = submission.tail_target(self.settings, session_id, tenant)
        items = self.live.follow(
            tenant, session_id, after_seq=after_seq, block_ms=1000, idle_timeout_s=idle_timeout_s
        )
        return submission.acting_for_each(self.settings, tenant, items)


__all__ = ["BusyPolicy", "Producer", "RunHandle", "RunSpec"]
