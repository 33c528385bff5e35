"""Signals on the worker: the mailbox around a run, the continuation that settles a call parked
on a signal, and the look in the mailbox when a run parks on one.

- :class:`SignalScope`, around a run's execution: its tools read the session's mailbox
  (``ctx.wait_for_signal``); a continuation's ``signal`` resolutions become the signal they
  take (or the timeout's result) before the run settles them; a run resumed from a step
  checkpoint counts the signals its replayed steps consumed; a run rolled back (failed,
  cancelled) gives back what it consumed.
- :func:`signals_after_park`, in the commit's ``wait_index`` step (so a run finished as found
  takes it again): for each name the session's calls wait for, when the mailbox holds a signal
  the session has not consumed (sent while the run was parking: the sender read no wait
  record then), the wake is submitted here, with the call's deterministic ids; and the
  mailbox forgets what the committed head consumed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from tether.core.events import EventType
from tether.core.results import Resolution
from tether.runs.contract import RunRequest
from tether.runs.queue.base import SubmitState
from tether.runs.signals.base import SignalMailbox, signal_wake, waiting_for
from tether.runs.waits.base import WaitRecord
from tether.runtime.session import AgentSession
from tether.runtime.signals import (
    SignalInbox,
    advance_from_events,
    cursor_of,
    set_cursor,
    signal_output,
    signal_reader,
    timeout_output,
)
from tether.runtime.waiting import parked_calls
from tether.worker.engine.services import EngineServices

log = logging.getLogger(__name__)


class SignalScope:
    """One run's signals (see the module doc)."""

    def __init__(
        self, mailbox: SignalMailbox | None, session: AgentSession, request: RunRequest
    ) -> None:
        self._mailbox = mailbox
        self._session = session
        self._request = request
        self._before = cursor_of(session)

    def settled(self, request: RunRequest) -> RunRequest:
        """``request`` with each ``signal`` resolution of a call parked on a signal turned into
        that call's output: the first signal of its name not consumed, now consumed, or the
        timeout's result."""
        if self._mailbox is None or not any(r.action == "signal" for r in request.resolutions):
            return request
        parked = parked_calls(self._session.memory_snapshot().items)
        inbox = SignalInbox(self._mailbox, self._session)
        resolutions = []
        for r in request.resolutions:
            wait = parked.get(r.call_id)
            if r.action == "signal" and wait is not None and wait.name is not None:
                signal = inbox.take(wait.name)
                text = signal_output(signal) if signal is not None else timeout_output(wait.name)
                r = Resolution(call_id=r.call_id, action="output", text=text)
            resolutions.append(r)
        return request.model_copy(update={"resolutions": tuple(resolutions)})

    @contextmanager
    def reading(self, first_seq: int) -> Iterator[None]:
        """Around the run: the mailbox forgets what the head consumed (the mailbox stays short
        also when signals are taken at once, never parked on); tools read it; what this run's
        own events (from ``first_seq``: a resumed run's replayed steps) consumed counts; a
        rollback gives back what the run consumed."""
        session, run_id = self._session, self._request.run_id
        if self._mailbox is not None and self._before:  # what committed heads consumed
            self._mailbox.forget(session.tenant, session.session_id, self._before)
        # read from the log's end, not a copy of all it holds (twice) on every run's path; None:
        # every event held is this run's
        replayed = session.events_after(first_seq - 1)
        advance_from_events(session, session.events if replayed is None else replayed)
        with signal_reader(self._mailbox):
            yield
        newest = session.events_after(session.last_seq - 1)
        if newest is None:  # the newest is the only event held
            newest = session.events
        last = newest[-1] if newest else None
        if (
            last is not None
            and last.type is EventType.SESSION_RESTORED
            and last.run_id == run_id
            and last.seq >= first_seq
        ):  # rolled back: nothing it consumed was delivered
            set_cursor(session, self._before)


def signals_after_park(
    services: EngineServices, session: AgentSession
) -> Callable[[Sequence[WaitRecord]], None] | None:
    """The look in the mailbox after the session's calls are parked (None: no mailbox)."""
    mailbox = services.signals
    if mailbox is None:
        return None

    def look(records: Sequence[WaitRecord]) -> None:  # the committed head's cursor
        look_in_mailbox(services, session.tenant, session.session_id, cursor_of(session), records)

    return look


def look_in_mailbox(
    services: EngineServices,
    tenant: str,
    session_id: str,
    cursor: dict[str, str],
    records: Sequence[WaitRecord],
) -> None:
    """Wake the first call waiting for each name the mailbox holds a signal of that the session
    has not consumed (``cursor``: what its head consumed); forget the consumed ones. Also after
    reconcile parked calls again (a signal sent while Redis had lost the wait records)."""
    mailbox = services.signals
    if mailbox is None:
        return
    mailbox.forget(tenant, session_id, cursor)
    names = {r.wait_for.name for r in records if r.wait_for.kind == "signal"}
    for name in sorted(n for n in names if n is not None):
        if mailbox.first_after(tenant, session_id, name, cursor.get(name)):
            record = waiting_for(records, name)
            assert record is not None
            _submit_wake(services, record)


def _submit_wake(services: EngineServices, record: WaitRecord) -> None:
    """Submit the wake of ``record``'s call (a duplicate when a sender submitted it)."""
    request = signal_wake(record)
    (outcome,) = services.runs.submit_many([request], queue=record.queue)
    if outcome.state is SubmitState.QUEUED:
        services.wake(request.tenant, request.session_id)
        log.info(
            "signal %s for %s/%s came as it parked: woken",
            record.wait_for.name,
            record.tenant,
            record.session_id,
        )
