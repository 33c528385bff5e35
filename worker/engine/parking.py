"""Parking a run on the fleet, around its commit: what its session waits for after the run, made
durable and findable.

After a run, the session's memory says which calls are parked on the fleet (a
:class:`~tether.core.waits.WaitFor` on their outputs: :func:`~tether.runtime.waiting.parked_calls`).
The commit then takes two more named steps (:class:`~tether.worker.engine.commit.CommitStep`):

- ``wait_mark``, before ``head_put``: the session's durable mark (:mod:`tether.runs.waits.marks`)
  is written when it has parked calls, so no committed wait is ever without one;
- ``wait_index``, after ``head_put`` and before ``finish`` (the producer hears ``WAITING`` only
  once the fleet can wake it): the wait records and timers index are written for the parked calls
  (:meth:`~tether.runs.waits.base.WaitIndex.park`), the calls this run settled are forgotten, and
  the mark is deleted when nothing waits any more.

Both are idempotent, and a run finished as found (it committed, then its worker died) takes
``wait_index`` again (:func:`repark`), so a crash between any two steps loses no wait: before
``head_put`` the run is retried; after it, the head and the mark say what waits, and the next
holder (or reconcile, after Redis lost everything) indexes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tether.core.events import now_ms
from tether.observability import metrics
from tether.runs.contract import RunRequest
from tether.runs.waits.base import WaitIndex, WaitRecord
from tether.runs.waits.marks import BlobWaitMarks, WaitMark
from tether.runtime.session import AgentSession
from tether.runtime.waiting import parked_calls


@dataclass(frozen=True)
class Parking:
    """What one commit records of its session's parked calls."""

    tenant: str
    session_id: str
    records: tuple[WaitRecord, ...]
    """The calls parked once the run is committed."""
    settled: tuple[str, ...]
    """Calls the run gave an output (they wait no more)."""
    index: WaitIndex
    marks: BlobWaitMarks | None
    on_parked: Callable[[Sequence[WaitRecord]], None] | None = None
    """Told of the calls just parked (children that ended already wake their parent)."""
    after: Callable[[Sequence[WaitRecord]], None] | None = None
    """Told the parked calls once they are indexed (signals: a look in the mailbox)."""
    on_settled: Callable[[], object] | None = None
    """Called once the settled calls are forgotten (children no call waits on any more leave
    the family record)."""

    def mark(self) -> None:
        """The ``wait_mark`` step: the durable mark of a session that waits."""
        if self.records and self.marks is not None:
            mark = WaitMark(
                tenant=self.tenant,
                session_id=self.session_id,
                records=self.records,
                written_at_ms=now_ms(),
            )
            self.marks.put(mark)

    def record(self) -> None:
        """The ``wait_index`` step: index the parked calls, forget the settled ones, and the
        mark once nothing waits."""
        self.index.park(self.records)
        for r in self.records:
            metrics.wait_parked(r.wait_for.kind)
        if self.on_parked is not None and self.records:
            self.on_parked(self.records)
        self.index.settle(self.tenant, self.session_id, self.settled)
        if self.settled and self.on_settled is not None:
            self.on_settled()
        if not self.records and self.settled and self.marks is not None:
            self.marks.delete(self.tenant, self.session_id)
        if self.after is not None:
            self.after(self.records)


def parking_for(
    index: WaitIndex | None,
    marks: BlobWaitMarks | None,
    session: AgentSession,
    request: RunRequest,
    queue: str | None,
    *,
    waiting: bool,
    on_parked: Callable[[Sequence[WaitRecord]], None] | None = None,
) -> Parking | None:
    """The parking of ``request``'s commit on ``session`` (``waiting``: the run ended
    ``WAITING``). None: nothing to record: no index configured, or the run neither parked nor
    settled a call (only those change what waits, so other runs skip reading memory)."""
    if index is None or not (waiting or request.resolutions):
        return None
    parked = parked_calls(session.memory_snapshot().items)
    settled = tuple(r.call_id for r in request.resolutions if r.call_id not in parked)
    if not parked and not settled:
        return None
    # a call parked by an earlier run is recorded again under this one (the newest run of the
    # session: its producer hears of the wake)
    records = tuple(
        WaitRecord(
            tenant=request.tenant,
            session_id=request.session_id,
            call_id=call_id,
            run_id=request.run_id,
            agent=request.agent,
            reply_to=request.reply_to,
            queue=queue,
            wait_for=wait_for,
            parked_at_ms=now_ms(),
        )
        for call_id, wait_for in parked.items()
    )
    return Parking(request.tenant, request.session_id, records, settled, index, marks, on_parked)
