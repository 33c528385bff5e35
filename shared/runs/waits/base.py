"""The wait-index seam: a session's parked calls, and the times the fleet wakes them.

A run that parks a call on the fleet (a timer, a signal, children) ends ``WAITING``; its worker
then records the call here (:meth:`WaitIndex.park`): a :class:`WaitRecord` in the session's own
keyspace, and, when the fleet must act at a time (a timer's due time, a timeout), a member of the
sharded timers index scored by that time. A sweeper takes due members (:meth:`WaitIndex.take_due`,
one script per shard, so two sweepers never take one member at once: a taken member's score moves
on by the redelivery delay, and it comes due again only if its wake was never submitted) and
submits the wake: a continuation run whose request id is :func:`wake_request_id` of the call, so a
second submission of the same wake (another sweeper after the delay, a retry, the signal that
raced the timeout) is a duplicate the run queue drops. The worker that commits the wake forgets
the call (:meth:`WaitIndex.settle`).

Format versions of :class:`WaitRecord` (field ``v``): 1.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Sequence
from typing import Literal, NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from tether.core.results import Resolution
from tether.core.waits import WaitFor
from tether.runs.contract import RunRequest, RunResult

#: A taken due member comes due again after this long when its wake was not submitted (the
#: sweeper died between taking it and submitting): the wake's request id makes a second
#: submission harmless.
REDELIVER_MS = 60_000


class WaitRecord(BaseModel):
    """One parked call, as the fleet needs it to wake it: which run parked it, which agent
    goes on with it and whom to tell."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    tenant: str
    session_id: str
    call_id: str = Field(min_length=1, max_length=256)
    run_id: str
    """The run that parked the call (it ended ``WAITING``)."""
    agent: str
    reply_to: str | None = None
    """The producer that submitted the parked run: the wake's completion goes to it too."""
    queue: str | None = None
    """The broker queue of the workers serving ``agent`` (None: the sweeper's own)."""
    wait_for: WaitFor
    parked_at_ms: int = 0

    @property
    def member(self) -> TimerMember:
        """Its member of the timers index."""
        return TimerMember(self.tenant, self.session_id, self.call_id)


class TimerMember(NamedTuple):
    """A member of the timers index: ``<tenant>/<session>/<call id>``."""

    tenant: str
    session_id: str
    call_id: str

    def text(self) -> str:
        """The member as stored (ids hold no ``/``; a call id may)."""
        return f"{self.tenant}/{self.session_id}/{self.call_id}"

    @classmethod
    def parse(cls, text: str) -> TimerMember | None:
        """The member ``text`` names (None: not a member)."""
        parts = text.split("/", 2)
        return cls(*parts) if len(parts) == 3 and all(parts) else None


@runtime_checkable
class WaitIndex(Protocol):
    """Where the fleet finds parked calls: per session, and by the time it must wake them."""

    def park(self, records: Sequence[WaitRecord]) -> None:
        """Record parked calls (idempotent: parking a recorded call again changes nothing but
        its record; a due time already taken is not moved back)."""

    def settle(self, tenant: str, session_id: str, call_ids: Sequence[str]) -> None:
        """Forget calls whose output was given (their records and index members)."""

    def records(self, tenant: str, session_id: str) -> list[WaitRecord]:
        """The session's parked calls."""

    def take_due(self, now_ms: int, *, limit: int = 100) -> list[TimerMember]:
        """Take up to ``limit`` members due at ``now_ms`` (over every shard): each is taken by one
        caller, and comes due again :data:`REDELIVER_MS` later unless :meth:`done`."""

    def done(self, members: Sequence[TimerMember]) -> None:
        """The wakes of ``members`` were submitted: drop them from the index."""

    def get_many(self, members: Sequence[TimerMember]) -> list[WaitRecord | None]:
        """The records of ``members`` (None where the call is not parked any more)."""

    def recorded(self, sessions: Sequence[tuple[str, str]]) -> list[bool]:
        """Whether each ``(tenant, session)`` has wait records (reconcile's cheap check)."""

    def counts(self) -> dict[str, int]:
        """How many calls wait in the timers index (``timers``), for gauges."""

    def next_due_ms(self) -> int | None:
        """When the next member of the timers index is due (None: it is empty)."""

    def lost(self) -> bool:
        """Whether the index was lost since the last call: a flushed Redis (its epoch is gone:
        set again, so one caller in the fleet sees each flush), or one gone back to an older
        state (a rollback: its epoch is older than one this caller saw; each caller that saw a
        newer one sees it)."""

    def take_reconcile(self, owner: str, ttl_ms: int) -> bool:
        """Whether ``owner`` reconciles the marks this period (one worker per ``ttl_ms``)."""


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]


def wake_request_id(tenant: str, session_id: str, call_id: str) -> str:
    """The request id of the continuation that settles a parked call: one per call, whoever
    submits it (sweeper, signal, child, cancel), so the run queue applies it once."""
    return "wake-" + _digest(tenant, session_id, call_id)


def wake_run_id(tenant: str, session_id: str, call_id: str) -> str:
    """The run id of that continuation (a follower computes it from the parked call alone)."""
    return "run-wake-" + _digest(tenant, session_id, call_id)


def settle_request(
    tenant: str,
    session_id: str,
    agent: str,
    resolution: Resolution,
    *,
    reply_to: str | None = None,
) -> RunRequest:
    """The continuation that settles one parked call with ``resolution`` (its output, or a
    cancel) and goes on: its ids derive from the call alone, whoever submits it."""
    call_id = resolution.call_id
    return RunRequest(
        run_id=wake_run_id(tenant, session_id, call_id),
        request_id=wake_request_id(tenant, session_id, call_id),
        tenant=tenant,
        session_id=session_id,
        agent=agent,
        input=None,
        resolutions=(resolution,),
        reply_to=reply_to,
    )


def waiting_reason(result: RunResult, ended: Container[str] = ()) -> str | None:
    """What a ``WAITING`` run waits for, in a few words (``timer due 2026-12-07T18:00:00Z``,
    ``children 2/3 (all)``, ``approval``, ``output``); None for a run that does not wait.
    ``ended``: the run ids of the session's children that ended (its family record)."""
    if result.status != "WAITING" or not result.pending:
        return None
    parked = [p.wait_for for p in result.pending if p.wait_for is not None]
    if parked:
        return parked[0].reason(ended)
    return "approval" if any(p.reason == "approval" for p in result.pending) else "output"
