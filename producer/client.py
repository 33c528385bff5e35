"""Producer: enqueue runs on sessions and get future-like handles back.

>>> producer = Producer()                      # settings from TETHER_* variables
>>> result = producer.run("s-1", "remember milk", agent="notes")
>>> handle = producer.run_async("s-1", "recall", agent="notes")
>>> handle.result(timeout=30).output
'milk'
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, Unpack

from celery import Celery

from tether.core.events import AgentEvent
from tether.core.results import Resolution
from tether.errors import InvalidInput, TetherError
from tether.ids import new_id, validate_tenant
from tether.keys import RedisKeys
from tether.observability.tracing import traced
from tether.persistence.deltas.live import LiveItem
from tether.persistence.deltas.live_redis import RedisLiveFeed
from tether.persistence.deltas.redis import RedisDeltaChannel
from tether.persistence.redis_conn import redis_from_url
from tether.persistence.streams.redis import RedisEventStream
from tether.producer import submission
from tether.producer.handle import RunHandle
from tether.producer.listener import CompletionListener
from tether.producer.publish import build_celery_app, publish_runs
from tether.producer.submission import RunSpec, Submitted
from tether.runs.contract import BusyPolicy, RunRef, RunResult, WireRequest
from tether.runs.options import RunOptionsKwargs
from tether.runs.queue.base import CancelOutcome, RunView
from tether.runs.queue.redis import RedisRunQueue
from tether.runs.usage.policy import admit_submission
from tether.settings import Settings, load_settings


class Producer:
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
        self.settings = settings or load_settings(**overrides)
        self.keys = RedisKeys(self.settings.namespace)
        self.redis = redis_from_url(self.settings.effective_redis_url)
        self.runs = RedisRunQueue(self.redis, self.keys, result_ttl_s=self.settings.result_ttl_s)
        #: The sessions' live event streams (was ``stream`` before :meth:`stream` followed a
        #: session's pieces too).
        self.event_stream = RedisEventStream(self.redis, keys=self.keys)
        self.live = RedisLiveFeed(self.event_stream, RedisDeltaChannel(self.redis, self.keys))
        self._celery = celery_app
        self._celery_lock = threading.Lock()
        #: One completion listener per tenant this producer submitted to (see listener_for).
        self._listeners: dict[str, CompletionListener] = {}
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
    def listener(self) -> CompletionListener:
        """The completion listener of this producer's own tenant (``settings.tenant``)."""
        return self.listener_for(self.settings.tenant)

    def listener_for(self, tenant: str) -> CompletionListener:
        """The completion listener of ``tenant``'s runs.

        Workers announce a run on the feed of its own tenant (a tenant's ACL user reads only
        its tenant's keys), so a producer that submits to several tenants reads one feed per
        tenant; with a single listener, the runs of the other tenants would wait for the
        periodic recheck instead of their announcement.
        """
        with self._celery_lock:
            listener = self._listeners.get(tenant)
            if listener is None:
                feed = self.keys.feed(tenant, self.producer_id)
                listener = self._listeners[tenant] = CompletionListener(self.runs, feed=feed)
            return listener

    def close(self) -> None:
        """Stop the listeners and close connections."""
        for tenant, listener in self._listeners.items():
            listener.close()
            with contextlib.suppress(TetherError):  # it expires on its own otherwise
                self.runs.close_feed(self.keys.feed(tenant, self.producer_id))
        self.redis.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- submitting ----------------------------------------------------------------------------

    def _handle_for(self, submitted: Submitted, queued_after: float | None = None) -> RunHandle:
        request = submitted.request
        return RunHandle(
            self,
            submitted.run_id,
            request_id=request.request_id,
            session_id=request.session_id,
            tenant=request.tenant,
            # only a run this submission queued announces itself on this producer's feed
            queued_after=queued_after if submitted.queued else None,
        )

    def run_async(
        self, session_id: str, input: str | None, **options: Unpack[RunOptionsKwargs]
    ) -> RunHandle:
        """Enqueue a run; returns at once with its handle. ``options``: the run's
        :class:`~tether.runs.options.RunOptions` (``agent`` is required).

        Submitting a ``request_id`` that was already submitted returns a handle on the original
        run (the input is applied once). ``durability`` (``"step"`` or ``"run"``) overrides the
        agent's (see docs/long-runs.md).

        Raises:
            InvalidInput: a malformed id, oversized input, or bad option (nothing is enqueued).
            TypeError: a keyword that is no run option.
        """
        return self.submit_many([submission.run_spec(session_id, input, **options)])[0]

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
        return self.resolve(
            session_id, [submission.rejection(call_id, reason)], agent=agent, tenant=tenant
        )

    def submit_tool_output(
        self, session_id: str, call_id: str, output: str, *, agent: str, tenant: str | None = None
    ) -> RunHandle:
        """Give the output of a call that waits for one, then the run goes on."""
        return self.resolve(
            session_id, [submission.tool_output(call_id, output)], agent=agent, tenant=tenant
        )

    def run(
        self,
        session_id: str,
        input: str | None,
        *,
        wait_s: float | None = None,
        **options: Unpack[RunOptionsKwargs],
    ) -> RunResult:
        """Enqueue a run and wait for its result, at most ``wait_s`` (see
        :meth:`RunHandle.result`); ``options`` as for :meth:`run_async`."""
        from tether.producer.worker_watch import GRACE_S, watch_for_workers

        handle = self.run_async(session_id, input, **options)
        # most runs end within the watch's grace: wait that long first, so they cost no thread
        # (a start, and a join on the way out that sat between the result and the caller)
        grace_s = GRACE_S if wait_s is None else min(wait_s, GRACE_S)
        try:
            return handle.result(timeout=grace_s)
        except TimeoutError:
            if wait_s is not None and wait_s <= grace_s:
                raise
        rest_s = None if wait_s is None else wait_s - grace_s
        with watch_for_workers(self, handle.run_id, grace_s=0):  # warns if no worker consumes
            return handle.result(timeout=rest_s)

    @traced("tether.submit")
    def submit_many(self, specs: Iterable[RunSpec]) -> list[RunHandle]:
        """Enqueue many runs with one Redis round trip and one broker connection.

        Each request is validated once and serialized once: the run record and the run message
        carry the same JSON text.
        """
        requests = submission.build_requests(self.settings, specs, self.producer_id)
        if not requests:
            return []
        admit_submission(self.runs.tenant_usage, self.settings, [w.request for w in requests])
        queued_after = time.monotonic()
        with submission.acting_for(self.settings, (w.request.tenant for w in requests)):
            outcomes = self.runs.submit_many(requests, queue=self.settings.queue)
        submitted = submission.plan_submission(requests, outcomes)
        for item in submitted:
            mode = item.stop_mode
            if mode is not None:
                self.runs.preempt(item.request.tenant, item.request.session_id, item.run_id, mode)
        publish_runs(
            self.celery,
            [self._message(s.wire) for s in submitted if s.queued],
        )
        for item in submitted:
            if item.rejection is not None:
                self.runs.record_rejected(item.rejection)
        return [self._handle_for(item, queued_after) for item in submitted]

    def resubmit(self, run_id: str) -> None:
        """Publish the stored request of ``run_id`` again (harmless: it is idempotent)."""
        view = self.record(run_id)
        if view is None or view.request is None:
            raise InvalidInput(f"run {run_id!r} is unknown or expired; nothing to resubmit")
        publish_runs(self.celery, [self._message(WireRequest.of(view.request))])

    def _message(self, wire: WireRequest) -> dict[str, Any]:
        """The run message of ``wire`` (only its ids with TETHER_REGISTERED_RUNS_ONLY)."""
        settings = self.settings
        return submission.run_message(wire, settings.queue, wake_only=settings.registered_runs_only)

    # --- following runs ------------------------------------------------------------------------

    def locate(self, run_id: str, *, tenant: str | None = None) -> RunRef | None:
        """Where run ``run_id`` of ``tenant`` (default: this producer's) lives, or None when
        that tenant has no such run (one read of the tenant's run index)."""
        scope = validate_tenant(tenant or self.settings.tenant)
        with submission.acting_for(self.settings, [scope]):
            return self.runs.locate(scope, submission.run_id_arg(run_id))

    def record(self, run_id: str, *, tenant: str | None = None) -> RunView | None:
        """The record of run ``run_id`` of ``tenant`` (default: this producer's), or None."""
        ref = self.locate(run_id, tenant=tenant)
        return self.runs.get(ref) if ref is not None else None

    def handle(self, run_id: str, *, tenant: str | None = None) -> RunHandle:
        """A handle on an existing run of ``tenant`` (default: this producer's) from any
        process; does no I/O. Another tenant's run settles with :class:`RunNotFound`."""
        scope = validate_tenant(tenant or self.settings.tenant)
        return RunHandle(self, submission.run_id_arg(run_id), tenant=scope)

    def cancel(self, run_id: str, *, tenant: str | None = None) -> CancelOutcome:
        """Ask a run to stop. ``CANCELLED``: it was queued and will never start. ``REQUESTED``:
        it is running and stops at its next step boundary, unless it finishes first (its events
        stay in the log, followed by a rollback: nothing of it stays in memory). ``FINISHED``
        or ``UNKNOWN``: nothing changed."""
        ref = self.locate(run_id, tenant=tenant)
        if ref is None:
            return CancelOutcome.UNKNOWN  # another tenant's run is not found: nothing changes
        return self.runs.request_cancel(ref)

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
            tenant,
            session_id,
            after_seq=after_seq,
            block_ms=1000,
            idle_timeout_s=idle_timeout_s,
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
