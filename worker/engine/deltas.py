"""Publishing the pieces of streamed model answers, off the model's thread.

:class:`DeltaPublisher` (one per worker process) takes pieces on the run's thread, where it only
appends to a list, and publishes them on a thread of its own: whatever accumulated while the
previous round trip was in flight goes out as the next batch (one script call), so the model
never waits for Redis and a fast model costs a round trip per batch, not per piece.
:class:`RunDeltaStream` is one run's :class:`~tether.runtime.streaming.RunDeltas`: it numbers
the pieces of each step and, at the end of the step's model call, waits until they are out, so
they precede the step's ``MODEL_RESPONSE`` event in Redis.

A failed publish never fails the run: it is logged and counted
(``tether_delta_publish_failures_total``), and the pieces are dropped; the committed
``MODEL_RESPONSE`` holds the whole answer anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict

from tether.errors import TetherError
from tether.models.base import ModelDelta
from tether.observability import metrics
from tether.persistence.deltas.base import DeltaChannel, LiveDelta
from tether.runs.leases.base import Lease

log = logging.getLogger(__name__)

#: How long the end of a step waits for its pieces to be out before it goes on without.
FLUSH_TIMEOUT_S = 2.0

_Queued = tuple[str, str, LiveDelta]  # tenant, session id, piece


class DeltaPublisher:
    """Publishes pieces in batches from one daemon thread (started on the first piece).

    Args:
        channel: where the pieces go.
        flush_timeout_s: the longest :meth:`flush` waits.
    """

    def __init__(self, channel: DeltaChannel, *, flush_timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        self.channel = channel
        self._flush_timeout_s = flush_timeout_s
        self._cond = threading.Condition()
        self._pending: list[_Queued] = []
        self._queued = 0  # pieces ever put
        self._handled = 0  # pieces ever published or dropped
        self._thread: threading.Thread | None = None

    def put(self, tenant: str, session_id: str, delta: LiveDelta) -> None:
        """Queue one piece (cheap: no I/O on the caller's thread)."""
        with self._cond:
            self._pending.append((tenant, session_id, delta))
            self._queued += 1
            if self._thread is None or not self._thread.is_alive():
                # started here, not in __init__: a Celery pool child forks after services exist
                self._thread = threading.Thread(
                    target=self._loop, name="tether-deltas", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def flush(self) -> bool:
        """Wait until every piece put so far is published (or dropped); False on timeout."""
        deadline = time.monotonic() + self._flush_timeout_s
        with self._cond:
            target = self._queued
            while self._handled < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                batch, self._pending = self._pending, []
            try:
                self._publish(batch)
            finally:
                with self._cond:
                    self._handled += len(batch)
                    self._cond.notify_all()

    def _publish(self, batch: list[_Queued]) -> None:
        by_session: dict[tuple[str, str], list[LiveDelta]] = defaultdict(list)
        for tenant, session_id, delta in batch:
            by_session[(tenant, session_id)].append(delta)
        for (tenant, session_id), deltas in by_session.items():
            try:
                self.channel.publish(tenant, session_id, deltas)
            except (TetherError, OSError) as exc:  # never the run's problem
                log.warning(
                    "dropped %d live pieces of %s/%s: %s", len(deltas), tenant, session_id, exc
                )
                metrics.delta_publish_failed(len(deltas))
            else:
                metrics.deltas_published(len(deltas))


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
        if not self._publisher.flush():
            log.warning(
                "live pieces of run %s step %d not all published within %.1f s; going on",
                self._run_id,
                step,
                FLUSH_TIMEOUT_S,
            )
            metrics.delta_flush_timed_out()
