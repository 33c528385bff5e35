"""Semantics shared by every event-stream implementation: validation, the view, the tail cursor.

Storage model: a session's stream is a log of *entries* in append order, each with the event's
``seq``, the writer's ``fence`` and the event. Appends obey the rules of
:mod:`tether.persistence.streams.base`, so
under one fence entries are contiguous; a writer with a newer fence may *rewind*, appending an
entry whose ``seq`` is at or below the previous last one.

The *view* (what readers see) follows from the log: an entry is visible unless a later entry has
a ``seq`` lower than or equal to its own. A rewind to ``s`` therefore supersedes every earlier
entry with ``seq >= s`` (the abandoned attempt's tail, even the part the new writer has not
rewritten yet), and for each ``seq`` the newest entry wins. The view is always contiguous, and its
last ``seq`` equals the stream meta's ``last_seq``.

Trims only ever drop a *prefix* of the log (the oldest entries), which never makes a superseded
entry visible again, because superseding entries are always later in the log. That holds for the
retentions applied on append too (``max_len``, and ``retention_s``: entries appended longer ago
than that are dropped before the batch is added, and a log without appends for that long is
emptied), since entries are appended in time order.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from tether.core.events import AgentEvent
from tether.errors import FencedOut, InvalidInput, StreamGap
from tether.ids import validate_id, validate_tenant

I = TypeVar("I")  # noqa: E741 - entry id type (int in memory, bytes in Redis)
D = TypeVar("D")  # entry payload type (AgentEvent in memory, JSON bytes in Redis)


@dataclass(frozen=True, slots=True)
class Entry(Generic[I, D]):
    """One log entry: where it sits in the log, its seq and fence, and its payload."""

    entry_id: I
    seq: int
    fence: int
    data: D


def validate_session(tenant: str, session_id: str) -> None:
    """Validate tenant and session id before any I/O."""
    validate_tenant(tenant)
    validate_id(session_id)


def validate_fence(fence: int) -> None:
    """A fence is a non-negative int (0 = written without a lease)."""
    if isinstance(fence, bool) or not isinstance(fence, int) or fence < 0:
        raise InvalidInput(f"fence {fence!r} is not allowed; pass the int of Lease.fence (>= 0)")


def validate_batch(tenant: str, session_id: str, events: Sequence[AgentEvent]) -> None:
    """Check a batch before any I/O: it belongs to the session and its seqs are contiguous.

    Raises:
        InvalidId: tenant or session id is malformed.
        InvalidInput: an event names another session, a seq is below 1, or seqs do not ascend
            by exactly one.
    """
    validate_session(tenant, session_id)
    for i, ev in enumerate(events):
        if ev.tenant != tenant or (ev.session_id is not None and ev.session_id != session_id):
            raise InvalidInput(
                f"event seq={ev.seq} belongs to {ev.tenant}/{ev.session_id}, not to "
                f"{tenant}/{session_id}; append it to its own session"
            )
        if ev.seq < 1:
            raise InvalidInput(f"event seq {ev.seq} is not allowed; sequence numbers start at 1")
        if i and ev.seq != events[i - 1].seq + 1:
            raise InvalidInput(
                f"batch for {tenant}/{session_id} is not contiguous: seq {events[i - 1].seq} is "
                f"followed by {ev.seq}; append events in ascending order without holes"
            )


def validate_read_args(after_seq: int, limit: int | None) -> None:
    """``after_seq >= 0`` and ``limit`` None or ``>= 0``."""
    if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
        raise InvalidInput(f"after_seq {after_seq!r} is not allowed; pass an int >= 0")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidInput(f"limit {limit!r} is not allowed; pass None or an int >= 0")


def validate_tail_args(after_seq: int, block_ms: int, idle_timeout_s: float | None) -> None:
    """``after_seq >= 0``, ``block_ms >= 1``, ``idle_timeout_s`` None or ``>= 0``."""
    validate_read_args(after_seq, None)
    if isinstance(block_ms, bool) or not isinstance(block_ms, int) or block_ms < 1:
        raise InvalidInput(f"block_ms {block_ms!r} is not allowed; pass an int >= 1")
    if idle_timeout_s is not None and idle_timeout_s < 0:
        raise InvalidInput(f"idle_timeout_s {idle_timeout_s!r} is not allowed; pass None or >= 0")


def validate_trim_args(max_len: int | None, min_seq: int | None) -> None:
    """At least one of ``max_len >= 0`` and ``min_seq >= 1``."""
    if max_len is None and min_seq is None:
        raise InvalidInput("trim needs max_len and/or min_seq; pass at least one")
    if max_len is not None and (isinstance(max_len, bool) or max_len < 0):
        raise InvalidInput(f"max_len {max_len!r} is not allowed; pass an int >= 0")
    if min_seq is not None and (isinstance(min_seq, bool) or min_seq < 1):
        raise InvalidInput(f"min_seq {min_seq!r} is not allowed; pass an int >= 1")


def validate_max_len(max_len: int | None) -> None:
    """A retention bound is None or ``>= 1``."""
    if max_len is not None and (isinstance(max_len, bool) or max_len < 1):
        raise InvalidInput(f"max_len {max_len!r} is not allowed; pass None or an int >= 1")


def validate_retention(retention_s: int | None) -> None:
    """A time-based retention is None or a whole number of seconds ``>= 1``."""
    if retention_s is not None and (
        isinstance(retention_s, bool) or not isinstance(retention_s, int) or retention_s < 1
    ):
        raise InvalidInput(
            f"retention_s {retention_s!r} is not allowed; pass None or an int >= 1 (seconds)"
        )


def fenced_out(tenant: str, session_id: str, fence: int, current: int) -> FencedOut:
    """The error for an append whose fence is older than the session's current one."""
    return FencedOut(
        f"append to {tenant}/{session_id} with fence {fence} refused: the session's current "
        f"fence is {current}, so another writer holds (or held) the lease; nothing was written. "
        "Abandon this attempt; the new lease holder continues the session"
    )


def fence_not_granted(tenant: str, session_id: str, fence: int, current: int) -> FencedOut:
    """The error for an append whose fence is newer than any lease grant (a forged token)."""
    return FencedOut(
        f"append to {tenant}/{session_id} with fence {fence} refused: no lease was ever granted "
        f"with that fence (the newest grant is {current}); nothing was written. Append only "
        "with the fence of a lease you hold"
    )


def sequence_gap(tenant: str, session_id: str, first_seq: int, last_seq: int) -> StreamGap:
    """The error for an append that would leave a hole after ``last_seq``."""
    return StreamGap(
        f"append to {tenant}/{session_id} starting at seq {first_seq} would leave a gap: the "
        f"stream ends at seq {last_seq}, so the next seq must be {last_seq + 1} (or lower, by a "
        "writer with a newer fence); nothing was written. Append the missing events first "
        "(a worker does, from the head and the archive)",
        last_seq=last_seq,
    )


def plan_append(
    first_seq: int, count: int, fence: int, last_seq: int | None, last_fence: int
) -> int | None:
    """How many leading events of a fence-checked batch to skip; None when it leaves a gap.

    Args:
        first_seq: the batch's first seq.
        count: the batch length.
        fence: the writer's fence (already checked to be ``>= last_fence``).
        last_seq: the stream's last seq, or None when the stream has no history yet (then any
            start is accepted: a restored session continues at its own next seq).
        last_fence: the fence of the last append.
    """
    if last_seq is None or count == 0:
        return 0
    if first_seq > last_seq + 1:
        return None
    if fence == last_fence:
        # Same writer: what is already there is a retry of the same batch, skip it.
        return min(count, last_seq + 1 - first_seq)
    return 0


def view_suffix(
    newest_first: Iterable[Entry[I, D]], after_seq: int
) -> tuple[list[Entry[I, D]], Entry[I, D] | None]:
    """The visible entries with ``seq > after_seq`` (ascending), and the log's newest entry.

    Walks the log backwards and stops as soon as no older entry can be visible above
    ``after_seq``, so reading near the end of a long log touches only its end.
    """
    kept: list[Entry[I, D]] = []
    top: Entry[I, D] | None = None
    floor: int | None = None  # lowest seq of any entry seen so far (all are later in the log)
    for entry in newest_first:
        if top is None:
            top = entry
        if floor is not None and floor <= after_seq + 1:
            break
        if floor is None or entry.seq < floor:
            if entry.seq > after_seq:
                kept.append(entry)
            floor = entry.seq
    kept.reverse()
    return kept, top


def tail_catch_up(
    newest_first: Iterable[Entry[I, D]], after_seq: int
) -> tuple[list[Entry[I, D]], Entry[I, D] | None, int]:
    """What a tail yields before waiting: ``(entries, newest entry, cursor start seq)``.

    Normally the visible entries above ``after_seq``. If the view ends *below* ``after_seq``, the
    consumer saw events that a newer writer has since rewound: every entry after the newest one
    with ``seq >= after_seq`` was written after the consumer read its last event, so the view
    from the lowest seq among them is yielded (seqs going back tell the consumer to drop its
    events from there on). A rewind that the new writer already re-extended past ``after_seq``
    cannot be told from a seq alone and is not replayed.
    """
    entries = iter(newest_first)
    top = next(entries, None)
    if top is None:
        return [], None, after_seq
    if top.seq >= after_seq:
        kept, _top = view_suffix(itertools.chain((top,), entries), after_seq)
        return kept, top, after_seq
    rewritten = [top]
    low = top.seq
    for entry in entries:
        if entry.seq >= after_seq:
            break
        rewritten.append(entry)
        low = min(low, entry.seq)
    kept, _top = view_suffix(rewritten, low - 1)
    return kept, top, low - 1


def tail_wait_ms(block_ms: int, idle_timeout_s: float | None, idle_since: float) -> int | None:
    """How long a tail's next blocking read may wait: ``block_ms``, cut to what is left of
    ``idle_timeout_s`` since ``idle_since`` (``time.monotonic()``); None once that has run out."""
    if idle_timeout_s is None:
        return block_ms
    remaining_ms = int((idle_timeout_s - (time.monotonic() - idle_since)) * 1000)
    if remaining_ms <= 0:
        return None
    return min(block_ms, remaining_ms)  # >= 1: BLOCK 0 would mean forever


class TailCursor:
    """Decides which newly appended entries a tail yields.

    A tail first yields what :func:`tail_catch_up` found, then every later entry that either
    continues (``seq > last``) or comes from a newer fence (a rewind: its seq goes back, which is
    how a consumer learns that its events from that seq on were abandoned).

    Args:
        start_seq: the seq the consumer is at (the third value of :func:`tail_catch_up`).
        top: the log's newest entry when the tail started (None: empty log).
    """

    def __init__(self, start_seq: int, top: Entry[I, D] | None) -> None:
        self.last_seq = start_seq
        self.last_fence = 0 if top is None else top.fence

    def accept(self, entry: Entry[I, D]) -> bool:
        """Whether to yield ``entry`` (a catch-up entry or one appended later); advance if so."""
        if entry.seq > self.last_seq or entry.fence > self.last_fence:
            self.last_seq = entry.seq
            self.last_fence = max(self.last_fence, entry.fence)
            return True
        return False
