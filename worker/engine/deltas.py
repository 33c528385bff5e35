"""Publishing the pieces of streamed model answers, off the model's thread.

:class:`DeltaPublisher` (one per worker process) takes pieces on the run's thread, where it only
appends to a list, and publishes them on a thread of its own: whatever accumulated while the
previous round trip was in flight goes out as the next batch (one script call), so the model
never waits for Redis and a fast model costs a round trip per batch, not per piece. Within a
batch, consecutive pieces of the same text (or the same call's arguments) are joined into one
entry (:func:`coalesce`): a model faster than Redis makes fewer, longer entries, a slow one an
entry per piece.
:class:`RunDeltaStream` is one run's :class:`~tether.runtime.streaming.RunDeltas`: it numbers
the pieces of each step and, at the end of the step's model call, waits until they are out, so
they precede the step's ``MODEL_RESPONSE`` event in Redis; or, when the run's event appends can
carry them, hands the pieces still queued to the next append (the one holding the
``MODEL_RESPONSE``), which sends them first in its round trip: on a Redis that fsyncs every
write, a model call's last pieces cost no write of their own.

A failed publish never fails the run: it is logged and counted
(``tether_delta_publish_failures_total``), and the pieces are dropped; the committed
``MODEL_RESPONSE`` holds the whole answer anyway.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import replace

from tether.models.base import ModelDelta
from tether.observability import metrics
from tether.persistence.deltas.base import DeltaChannel, LiveDelta
from tether.persistence.deltas.redis import RedisDeltaChannel
from tether.persistence.streams.redis import Rider
from tether.runs.leases.base import Lease

log = logging.getLogger(__name__)

#: How long the end of a step waits for its pieces to be out before it goes on without.
FLUSH_TIMEOUT_S = 2.0

_Queued = tuple[str, str, LiveDelta]  # tenant, session id, piece


class DeltaPublisher:
    """Publishes pieces in batches from one daemon thread (started on the first piece).

    The run's thread only appends to a deque (atomic, no lock) and sets an event when the
    thread sleeps; :meth:`flush` publishes what is queued itself when the thread is idle, and
    otherwise queues a marker that the thread sets once everything queued before it is out, so
    a step waits for exactly its own pieces.

    Args:
        channel: where the pieces go.
        flush_timeout_s: the longest :meth:`flush` waits.
    """

    def __init__(self, channel: DeltaChannel, *, flush_timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        self.channel = channel
        self._flush_timeout_s = flush_timeout_s
        self._queue: deque[_Queued | threading.Event] = deque()
        self._wake = threading.Event()
        self._start_lock = threading.Lock()
        self._started = False
        #: Held by whoever publishes from the queue: the thread, or a caller of :meth:`flush`.
        self._draining = threading.Lock()

    def put(self, tenant: str, session_id: str, delta: LiveDelta) -> None:
        """Queue one piece (cheap: no I/O and no lock on the caller's thread)."""
        self._queue.append((tenant, session_id, delta))
        if not self._wake.is_set():
            self._wake.set()
        if not self._started:
            self._start()

    def flush(self) -> bool:
        """Wait until every piece put so far is published (or dropped); False on timeout.

        When the thread is idle (not publishing), the caller publishes what is queued itself:
        the step waits for that round trip either way, and waking the thread to do it costs
        two thread switches, each a wait for the GIL behind whatever else runs.
        """
        if self._draining.acquire(blocking=False):
            try:
                self._drain()
            finally:
                self._draining.release()
            return True
        marker = threading.Event()
        self._queue.append(marker)
        self._wake.set()
        if not self._started:
            self._start()
        return marker.wait(self._flush_timeout_s)

    def hand_over(self, tenant: str, session_id: str, carry: Callable[[Rider], None]) -> bool:
        """Give the pieces still queued for the session to ``carry`` as one call that rides
        with the session's next event append (the same round trip, the pieces first: one write
        where there were two), instead of publishing them now; True when nothing of the
        session's is left to publish. False when the thread is publishing or the channel takes
        no riders: the caller flushes as usual."""
        channel = self.channel
        if not isinstance(channel, RedisDeltaChannel) or not self._draining.acquire(blocking=False):
            return False
        try:
            items: list[_Queued | threading.Event] = []
            while self._queue:
                items.append(self._queue.popleft())
            mine = [
                i
                for i in items
                if not isinstance(i, threading.Event) and i[:2] == (tenant, session_id)
            ]
            if len(mine) < len(items):  # other sessions' pieces, or a waiter: publish in order
                self._queue.extendleft(reversed(items))
                self._drain()
                return True
            if mine:
                n = len(mine)
                pieces = coalesce([delta for _t, _s, delta in mine])
                carry(channel.rider(tenant, session_id, pieces, lambda r: _rode(r, n, session_id)))
            return True
        finally:
            self._draining.release()

    def _start(self) -> None:
        # started on first use, not in __init__: a Celery pool child forks after services exist
        with self._start_lock:
            if not self._started:
                threading.Thread(target=self._loop, name="tether-deltas", daemon=True).start()
                self._started = True

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()  # before draining: a piece queued from here on wakes us again
            with self._draining:
                self._drain()

    def _drain(self) -> None:
        """Publish everything queued, setting each marker once what preceded it is out (called
        holding ``_draining``: one drainer at a time keeps the pieces in order)."""
        batch: list[_Queued] = []
        while self._queue:
            item = self._queue.popleft()
            if isinstance(item, threading.Event):
                self._publish(batch)
                batch = []
                item.set()
            else:
                batch.append(item)
        self._publish(batch)

    def _publish(self, batch: list[_Queued]) -> None:
        if not batch:
            return
        by_session: dict[tuple[str, str], list[LiveDelta]] = defaultdict(list)
        for tenant, session_id, delta in batch:
            by_session[(tenant, session_id)].append(delta)
        for (tenant, session_id), pieces in by_session.items():
            deltas = coalesce(pieces)
            try:
                self.channel.publish(tenant, session_id, deltas)
            except Exception as exc:  # never the run's problem, nor the end of this thread
                log.warning(
                    "dropped %d live pieces of %s/%s: %s", len(pieces), tenant, session_id, exc
                )
                metrics.delta_publish_failed(len(pieces))
            else:
                metrics.deltas_published(len(pieces))


def _rode(reply: object, n: int, session_id: str) -> None:
    """Count the pieces a rider published, or log and count them dropped."""
    if isinstance(reply, Exception):
        log.warning("dropped %d live pieces of %s: %s", n, session_id, reply)
        metrics.delta_publish_failed(n)
    else:
        metrics.deltas_published(n)


def coalesce(pieces: list[LiveDelta]) -> list[LiveDelta]:
    """``pieces`` with each run of consecutive pieces of one step's text (or of one call's
    arguments) joined into one, which keeps the index of its first piece; a piece that names
    its call (id, tool) starts a new one."""
    out: list[LiveDelta] = []
    head: LiveDelta | None = None
    parts: list[str] = []
    for piece in pieces:
        if (
            head is not None
            and piece.call_id is None
            and piece.tool_name is None
            and piece.step == head.step
            and piece.kind == head.kind
            and piece.call_index == head.call_index
            and piece.run_id == head.run_id
            and piece.fence == head.fence
        ):
            parts.append(piece.text)
            continue
        if head is not None:
            out.append(head if len(parts) == 1 else replace(head, text="".join(parts)))
        head, parts = piece, [piece.text]
    if head is not None:
        out.append(head if len(parts) == 1 else replace(head, text="".join(parts)))
    return out


class RunDeltaStream:
    """One run's pieces, numbered per step under the lease's fence.

    Args:
        publisher: the worker's publisher.
        lease: the lease the run executes under (its fence marks the attempt).
        run_id: the run.
    """

    def __init__(self, publisher: DeltaPublisher, lease: Lease, run_id: str) -> None:
        self._publisher = publisher
        self._tenant = lease.tenant
        self._session_id = lease.session_id
        self._fence = lease.fence
        self._run_id = run_id
        self._step = -1
        self._index = 0
        self.carry: Callable[[Rider], None] | None = None
        """Where a step's last pieces go when they can ride with the run's next event append
        (:meth:`DeltaPublisher.hand_over`); None: each step waits until its pieces are out."""

    def piece(self, step: int, delta: ModelDelta) -> None:
        if step != self._step:
            self._step, self._index = step, 0
        self._publisher.put(
            self._tenant,
            self._session_id,
            LiveDelta(
                run_id=self._run_id,
                fence=self._fence,
                step=step,
                index=self._index,
                kind=delta.kind,
                text=delta.text,
                call_index=delta.call_index,
                call_id=delta.call_id,
                tool_name=delta.tool_name,
            ),
        )
        self._index += 1

    def step_done(self, step: int) -> None:
        self._step = -1  # a model call retried within the step numbers its pieces from 0 again
        carry = self.carry
        if carry is not None and self._publisher.hand_over(self._tenant, self._session_id, carry):
            return
        if not self._publisher.flush():
            log.warning(
                "live pieces of run %s step %d not all published within %.1f s; going on",
                self._run_id,
                step,
                FLUSH_TIMEOUT_S,
            )
            metrics.delta_flush_timed_out()
