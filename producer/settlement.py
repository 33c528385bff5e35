"""The sans-IO core of waiting for runs: what :class:`~tether.producer.handle.RunHandle` and
:class:`~tether.producer.handle_aio.AsyncRunHandle`, and the two completion listeners
(:mod:`~tether.producer.listener`, :mod:`~tether.producer.listener_aio`) share.

Nothing here reads Redis: the ids a handle knows of its run and what waiting on it returns or
raises; the listeners' book of awaited runs (which completion settles which handle, which run
needs a look at its record, which run is lost); and what a handle gives of its session's live
streams. The shells do the reads (redis-py on a thread, or ``redis.asyncio`` on the event loop)
and hand the answers here, so both sides decide the same way by construction.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tether.core.events import AgentEvent
from tether.core.results import RunStatus
from tether.errors import RunLost, RunNotFound
from tether.persistence.deltas.live import LiveItem
from tether.runs.contract import RunRef, RunResult
from tether.runs.queue.base import Completion

log = logging.getLogger(__name__)

Settle = Callable[[RunResult], None]
#: The longest blocking read of a completion feed.
BLOCK_MS = 1000
#: How often every awaited run record is checked directly.
RECHECK_INTERVAL_S = 2.0
#: A run is declared lost after its record was missing at this many consecutive checks (the
#: first check may come before a run submitted from another process has its record).
LOST_AFTER_MISSES = 2
#: Completions remembered after they went by unawaited (a run registered later is looked up).
SEEN_MAX = 10_000
#: Pause after a failed read of the completion stream.
RETRY_PAUSE_S = 0.5
#: How long a handle's ``stream`` waits for more before it looks at the run again (the
#: fallback: a run's end mark in its session's delta channel wakes the wait at its commit).
STREAM_BLOCK_MS = 100
#: How long a handle's ``stream`` that read its run's end mark waits for the listener to
#: settle it before it follows the session again (the listener is woken by the same commit).
END_WAIT_S = 2.0


# --- what a handle resolves to ------------------------------------------------------------------


@dataclass
class RunIds:
    """The ids a handle knows of its run (all but ``run_id`` are unknown for a handle
    reattached by run id, until its record or result is read)."""

    run_id: str
    request_id: str | None = None
    session_id: str | None = None
    tenant: str | None = None

    @property
    def known(self) -> bool:
        """Whether the session is known."""
        return self.session_id is not None

    def ref(self) -> RunRef | None:
        """Where the run lives, when the session and tenant are known."""
        if self.session_id is None or self.tenant is None:
            return None
        return RunRef(self.tenant, self.session_id, self.run_id)

    def foreign(self, tenant: str | None) -> bool:
        """Whether a record of ``tenant`` belongs to another tenant than the caller's: then the
        run is "not found" for this handle (an id never reveals another tenant's run)."""
        return bool(self.tenant and tenant and tenant != self.tenant)

    def learn(self, request_id: str, session_id: str, tenant: str) -> None:
        """Fill in ids read from the run's record or result (known ones are kept; another
        tenant's record teaches nothing)."""
        if self.foreign(tenant):
            return
        self.request_id = self.request_id or request_id or None
        self.session_id = self.session_id or session_id or None
        self.tenant = self.tenant or tenant or None

    def complete(self, result: RunResult) -> RunResult:
        """``result`` with the ids it lacks filled in (a result made up by the listener for a
        lost run carries none), and learn the ids it has; another tenant's result becomes
        :func:`not_found`."""
        if self.foreign(result.tenant):
            return not_found(self.run_id, self.tenant or "")
        known = {
            "request_id": self.request_id,
            "session_id": self.session_id,
            "tenant": self.tenant,
        }
        missing = {k: v for k, v in known.items() if v and not getattr(result, k)}
        if missing:
            result = result.model_copy(update=missing)
        self.learn(result.request_id, result.session_id, result.tenant)
        return result


def not_found(run_id: str, tenant: str) -> RunResult:
    """The result a handle settles with for a run its tenant cannot see (nothing of the real
    record: no output, no session)."""
    return RunResult(
        run_id=run_id,
        request_id="",
        session_id="",
        tenant=tenant,
        status=RunStatus.FAILED,
        error_type=RunNotFound.__name__,
        error_message=(
            f"run {run_id} not found for tenant {tenant!r}; check the run id and the tenant "
            "(`--tenant`, or the producer's TETHER_TENANT)"
        ),
    )


def is_cancelled(result: RunResult) -> bool:
    """Whether the run ended cancelled (the handle is then a cancelled future)."""
    return result.status is RunStatus.CANCELLED


def failure_of(result: RunResult) -> BaseException | None:
    """The exception a handle raises for a failed run (its ``.result`` is the RunResult)."""
    if result.status is not RunStatus.FAILED:
        return None
    return result.error() or RuntimeError(result.error_message)


def cancelled_error(run_id: str) -> concurrent.futures.CancelledError:
    """What waiting on a cancelled run raises."""
    return concurrent.futures.CancelledError(f"run {run_id} was cancelled")


def outcome(result: RunResult) -> RunResult:
    """What waiting returns for ``result``: the result itself, or the run's error raised."""
    if is_cancelled(result):
        raise cancelled_error(result.run_id)
    error = failure_of(result)
    if error is not None:
        raise error
    return result


def cancelled_before_start(ids: RunIds) -> RunResult:
    """The result a handle gives once its own cancel stopped the run before it started (the
    worker records the same when it reaches the run)."""
    return RunResult(
        run_id=ids.run_id,
        request_id=ids.request_id or "",
        session_id=ids.session_id or "",
        tenant=ids.tenant or "",
        status=RunStatus.CANCELLED,
        error_type="RunCancelled",
        error_message="cancelled before it started",
    )


def never_started(result: RunResult | None) -> bool:
    """Whether a cancelled run's result says it was cancelled before any attempt."""
    return result is not None and is_cancelled(result) and result.attempts == 0


# --- the listeners' book of awaited runs -----------------------------------------------------


def lost_result(run_id: str) -> RunResult:
    """The FAILED result given to a handle whose run record vanished (ids filled by the handle)."""
    error = RunLost(
        f"run {run_id}: its record vanished from Redis (restarted without persistence, or the "
        "record expired after TETHER_RESULT_TTL_S); whether it was applied is recorded in the "
        "session head. Submit it again with the same request_id: it is applied at most once"
    )
    return RunResult(
        run_id=run_id,
        request_id="",
        session_id="",
        tenant="",
        status=RunStatus.FAILED,
        error_type=error.error_type,
        error_message=str(error),
    )


def call_settles(run_id: str, settles: list[Settle], result: RunResult) -> None:
    """Hand ``result`` to everyone who waited on the run (one failing callback stops none)."""
    for settle in settles:
        try:
            settle(result)
        except Exception:
            log.exception("settling handle %s failed", run_id)


class AwaitedRuns:
    """The runs a listener resolves, who waits on each, where the listener's feed position was
    taken, and which completions went by unawaited (no I/O, no locking: the threaded listener
    locks around it, the asyncio one runs on one loop)."""

    def __init__(self) -> None:
        self._settles: dict[str, list[Settle]] = {}
        self._refs: dict[str, RunRef] = {}
        self._misses: dict[str, int] = {}
        #: ``time.monotonic()`` once the feed position was first known (None: not yet).
        self.positioned_at: float | None = None
        #: Completions read while nobody awaited them (newest last), so a run registered after
        #: its completion went by is looked up, not waited for; and when the oldest was dropped.
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._seen_dropped_at = 0.0

    def __len__(self) -> int:
        return len(self._settles)

    def positioned(self) -> None:
        """Note that the listener's feed position was taken now."""
        self.positioned_at = time.monotonic()

    def add(self, ref: RunRef, settle: Settle) -> None:
        """Await run ``ref`` on behalf of ``settle``."""
        self._refs[ref.run_id] = ref
        self._settles.setdefault(ref.run_id, []).append(settle)

    def needs_look(self, run_id: str, queued_after: float | None) -> bool:
        """Whether a run just registered needs a look at its record: not when its producer
        queued it (``queued_after``: ``time.monotonic()`` before it did) after the feed position
        was taken, so that its completion is still ahead of the position, and it was not seen
        going by."""
        unseen = (
            queued_after is not None
            and self.positioned_at is not None
            and self.positioned_at < queued_after
            and self._seen_dropped_at < queued_after
            and run_id not in self._seen
        )
        return not unseen

    def wanted(self, run_ids: Sequence[str]) -> list[RunRef]:
        """Those of ``run_ids`` that are awaited."""
        return [self._refs[r] for r in run_ids if r in self._settles]

    def refs(self) -> list[RunRef]:
        """Every awaited run."""
        return [self._refs[r] for r in self._settles]

    def take(self, run_id: str) -> list[Settle]:
        """Stop awaiting ``run_id``; who waited on it."""
        self._misses.pop(run_id, None)
        self._refs.pop(run_id, None)
        return self._settles.pop(run_id, [])

    def batch(self, entries: Sequence[Completion]) -> tuple[dict[str, RunResult], list[RunRef]]:
        """A batch of completions read from the feed: the awaited runs it settles with the
        result their entry carries, and the awaited runs whose record must be read (one round
        trip for the batch); the unawaited ones are remembered."""
        carried = {c.ref.run_id: c.result for c in entries if c.result is not None}
        run_ids = list(dict.fromkeys(c.ref.run_id for c in entries))
        wanted = self.wanted(run_ids)
        awaited = {ref.run_id for ref in wanted}
        self._remember([r for r in run_ids if r not in awaited])
        settled = {ref.run_id: carried[ref.run_id] for ref in wanted if ref.run_id in carried}
        return settled, [ref for ref in wanted if ref.run_id not in carried]

    def _remember(self, run_ids: Sequence[str]) -> None:
        for run_id in run_ids:
            self._seen[run_id] = None
            self._seen.move_to_end(run_id)
        while len(self._seen) > SEEN_MAX:
            self._seen.popitem(last=False)
            self._seen_dropped_at = time.monotonic()

    def checked(
        self, checked: Sequence[RunRef], found: Mapping[str, RunResult | None]
    ) -> dict[str, RunResult]:
        """A full check of the records of ``checked``: the finished runs with their results,
        and the runs now deemed lost (their record was missing at :data:`LOST_AFTER_MISSES`
        consecutive checks) with :func:`lost_result`."""
        settled = {run_id: result for run_id, result in found.items() if result is not None}
        for _, _, run_id in checked:
            if run_id in found:
                self._misses.pop(run_id, None)
            elif run_id in self._settles:
                misses = self._misses.get(run_id, 0) + 1
                self._misses[run_id] = misses
                if misses >= LOST_AFTER_MISSES:
                    log.warning(
                        "run %s has no record any more; resolving its handle as lost", run_id
                    )
                    settled[run_id] = lost_result(run_id)
        return settled


class Rechecks:
    """When a listener asks every awaited record directly: every ``interval_s``, and at once
    after a Redis outage or a position taken late (a completion may have gone by unread)."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._next = time.monotonic() + interval_s

    def soon(self) -> None:
        """Check at the next turn of the loop."""
        self._next = 0.0

    def due(self) -> bool:
        """Whether to check now (then the next check is an interval away)."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self._interval_s
        return True


# --- what a handle gives of its session's live streams -----------------------------------------


def gives(event: AgentEvent, run_id: str, given: int) -> bool:
    """Whether a handle of ``run_id`` that gave events up to seq ``given`` gives ``event``: the
    run's own, and the event that takes the place of one it gave when a redo after a crash
    goes back (the next attempt's restore of the head, which names no run): without it the
    client kept the dead attempt's event at that place, and its view held two user inputs."""
    return event.run_id == run_id or (event.run_id is None and 0 < event.seq <= given)


class RunFollow:
    """Which items of a session's live streams a handle of ``run_id`` gives, and when it has
    given all of them (``events`` and ``stream`` of both handles)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        #: The seq of the newest event read (a replacement after a retried attempt may go back).
        self.last_seq = 0
        self._given = 0
        self._idle_since = time.monotonic()
        #: Whether the run's end mark was read since the follower last started.
        self.ended = False

    def end(self, run_id: str) -> None:
        """A run of the session was finished (its end mark was read)."""
        if run_id == self.run_id:
            self.ended = True

    def stops(self, final: RunResult | None) -> bool:
        """Whether the follower of the session stops: the run is :meth:`complete`, or its end
        mark was read (the handle then waits for its result, not for the session)."""
        return self.ended or self.complete(final)

    def again(self, final: RunResult | None) -> bool:
        """After the follower stopped at the run's end mark and the handle waited for the
        result: whether to follow the session again (the result is not there yet, or not every
        event of the run was read); the end mark is forgotten."""
        ended, self.ended = self.ended, False
        return ended and not self.complete(final)

    def event(self, event: AgentEvent) -> bool:
        """Take an event of the session's stream; whether to give it."""
        self.last_seq = event.seq
        self._idle_since = time.monotonic()
        if gives(event, self.run_id, self._given):
            self._given = event.seq
            return True
        return False

    def item(self, item: LiveItem) -> bool:
        """Take an event or a piece of the session's live feed; whether to give it."""
        if isinstance(item, AgentEvent):
            return self.event(item)
        return item.run_id == self.run_id

    def complete(self, final: RunResult | None) -> bool:
        """Whether the run finished (``final``: its result, None while it runs) and every one of
        its events was read."""
        return final is not None and (final.last_seq == 0 or self.last_seq >= final.last_seq)

    def over(self, final: RunResult | None, idle_timeout_s: float | None) -> bool:
        """Whether ``events`` ends: the run is :meth:`complete`, or it runs on and no event came
        for ``idle_timeout_s`` (None: never)."""
        if final is not None:
            return self.complete(final)
        idle_s = time.monotonic() - self._idle_since
        return idle_timeout_s is not None and idle_s > idle_timeout_s
