"""The runs a console shows: in flight (from the session queues) and recently finished (from
the completion feed), read from their run records, one tenant only."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from typing import Any, cast

from tether.errors import InvalidId
from tether.ids import validate_id
from tether.keys import DONE_SHARDS
from tether.persistence.active_index import active_sessions as all_active_sessions
from tether.producer.ops.console.backends import Backends
from tether.runs.contract import RunRef
from tether.runs.queue.base import RunView
from tether.runs.queue.record import RunField, RunState
from tether.runs.queue.redis import done_entry
from tether.runs.waits.base import waiting_reason
from tether.runs.waits.children_redis import family_key, parse_family

#: Finished runs looked at, newest first (the completion feed keeps far more).
RECENT_FINISHED = 300
#: Queued runs listed per session.
MAX_QUEUED_PER_SESSION = 100
RUN_STATUSES = (
    RunState.QUEUED,
    RunState.RUNNING,
    "WAITING",
    "FAILED",
    "COMPLETED",
    "CANCELLED",
    "INTERRUPTED",
    "CONTINUATION_REQUIRED",
)


@dataclass(frozen=True)
class RunRow:
    """One run, as its record tells it."""

    run_id: str
    session_id: str
    status: str
    agent: str
    attempts: int
    worker: str | None
    submitted_at_ms: int
    started_at_ms: int
    queue_ms: int | None
    run_ms: int | None
    error: str | None
    cancel_requested: bool
    output: str | None = None
    waiting: str | None = None
    """What the run waits for now: a running one (``"model budget"``), a ``WAITING`` one
    (``"timer due ..."``, ``"children 2/3 (all)"``, ``"approval"``)."""
    parked: str | None = None
    """The kind of wait a ``WAITING`` run parked on the fleet (``timer``, ``signal``,
    ``children``): the console offers to wake or cancel it."""

    @property
    def finished(self) -> bool:
        """True once the run has a result."""
        return self.status not in (RunState.QUEUED, RunState.RUNNING)


def _row(
    view: RunView,
    attempts: int,
    cancel_requested: bool,
    worker: str | None,
    ended: Container[str] = (),
) -> RunRow:
    result, request = view.result, view.request
    error = None
    if result is not None and result.error_type:
        error = f"{result.error_type}: {result.error_message or ''}"
    elif view.last_error:
        error = view.last_error
    return RunRow(
        run_id=view.run_id,
        session_id=view.session_id,
        status=str(result.status) if result is not None else view.status,
        agent=request.agent if request is not None else "?",
        attempts=result.attempts if result is not None and result.attempts else attempts,
        worker=(result.worker if result is not None else None) or worker,
        submitted_at_ms=view.submitted_at_ms,
        started_at_ms=view.started_at_ms,
        queue_ms=result.queue_ms if result is not None else None,
        run_ms=result.run_ms if result is not None else None,
        error=error,
        cancel_requested=cancel_requested and result is None,
        output=result.output if result is not None else None,
        waiting=view.waiting if result is None else waiting_reason(result, ended),
        parked=_parked_kind(view),
    )


def _parked_kind(view: RunView) -> str | None:
    """The kind of the first call ``view``'s ``WAITING`` run parked on the fleet (None: none)."""
    result = view.result
    if result is None or result.status != "WAITING":
        return None
    kinds = [p.wait_for.kind for p in result.pending if p.wait_for is not None]
    return kinds[0] if kinds else None


def read_runs(b: Backends, tenant: str, refs: list[RunRef]) -> list[RunRow]:
    """The rows of ``refs`` that belong to ``tenant`` (others and unknown ones left out)."""
    mine = [r for r in refs if r.tenant == tenant]
    views = [v for v in (b.runs.get(r) for r in mine) if v is not None and v.tenant == tenant]
    if not views:
        return []
    parents = [v for v in views if _parked_kind(v) == "children"]
    pipe = b.client.pipeline(transaction=False)
    for view in views:
        pipe.get(b.keys.attempts(*view.ref))
        pipe.exists(b.keys.cancel(*view.ref))
        pipe.hget(b.keys.run(*view.ref), RunField.WORKER)  # the record's, while it runs
    for view in parents:  # a wait on children: how many ended (in the same round trip)
        pipe.hgetall(family_key(b.keys, view.tenant, view.session_id))
    replies: list[Any] = pipe.execute()
    own, families = replies[: 3 * len(views)], replies[3 * len(views) :]
    ended = {v.run_id: parse_family(raw).ended for v, raw in zip(parents, families, strict=True)}
    return [
        _row(
            view,
            int(attempts or 0),
            bool(cancel),
            worker.decode() if worker else None,
            ended.get(view.run_id, ()),
        )
        for view, attempts, cancel, worker in zip(
            views, own[::3], own[1::3], own[2::3], strict=True
        )
    ]


def get_run(b: Backends, tenant: str, run_id: str) -> tuple[RunRow, RunView] | None:
    """One run of ``tenant`` with its record, or None (unknown, expired, another tenant's)."""
    try:
        validate_id(run_id, kind="run id")
    except InvalidId:
        return None
    ref = b.runs.locate(tenant, run_id)
    view = b.runs.get(ref) if ref is not None else None
    if ref is None or view is None or view.tenant != tenant:
        return None
    rows = read_runs(b, tenant, [ref])
    return (rows[0], view) if rows else None


def active_sessions(b: Backends, tenant: str) -> list[str]:
    """Session ids of ``tenant`` with queued or running runs."""
    return sorted(s for _, s in all_active_sessions(b.client, b.keys, tenant=tenant))


def queued_run_ids(b: Backends, tenant: str, session_ids: list[str]) -> list[RunRef]:
    """Run ids in the queues of these sessions (head first; the head may be running)."""
    if not session_ids:
        return []
    pipe = b.client.pipeline(transaction=False)
    for session_id in session_ids:
        pipe.lrange(b.keys.pending(tenant, session_id), 0, MAX_QUEUED_PER_SESSION - 1)
    replies = cast(list[list[bytes]], pipe.execute())
    return [
        RunRef(tenant, session_id, run_id.decode())
        for session_id, ids in zip(session_ids, replies, strict=True)
        for run_id in ids
    ]


def recent_finished_ids(b: Backends, count: int = RECENT_FINISHED) -> list[RunRef]:
    """Runs from the completion feed, newest first (every tenant's: filter after); the newest
    ``count`` of each shard read (one pipelined round trip), the newest ``count`` of them kept."""
    pipe = b.client.pipeline(transaction=False)
    for shard in range(DONE_SHARDS):
        pipe.xrevrange(b.keys.done(shard), "+", "-", count=count)
    shards = cast(list[list[tuple[bytes, dict[bytes, bytes]]]], pipe.execute())
    entries = sorted((e for shard in shards for e in shard), key=_newest_first)[:count]
    seen: dict[RunRef, None] = {}
    for entry_id, fields in entries:
        if b"run_id" in fields:
            seen.setdefault(done_entry(entry_id, fields)[1], None)
    return list(seen)


def _newest_first(entry: tuple[bytes, dict[bytes, bytes]]) -> tuple[int, int]:
    ms, _, seq = entry[0].partition(b"-")
    return -int(ms), -int(seq or 0)


def list_runs(b: Backends, tenant: str, status: str = "", limit: int = 200) -> list[RunRow]:
    """In-flight runs first (running, then queued), then recently finished ones, newest first;
    only those with ``status`` when given."""
    in_flight = read_runs(b, tenant, queued_run_ids(b, tenant, active_sessions(b, tenant)))
    in_flight.sort(key=lambda r: (r.status != RunState.RUNNING, r.submitted_at_ms))
    ids = {r.run_id for r in in_flight}
    finished = [
        r
        for r in read_runs(b, tenant, [i for i in recent_finished_ids(b) if i.run_id not in ids])
        if r.finished
    ]
    rows = in_flight + finished
    if status:
        rows = [r for r in rows if r.status == status.upper()]
    return rows[:limit]
