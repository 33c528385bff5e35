"""The sessions a console shows: the list (search by id and status) and one session's detail
(its timeline, folded memory, queued runs and the calls a waiting run waits on)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tether.core.fold import project_events
from tether.core.memory import MemorySnapshot
from tether.core.results import PendingCall
from tether.core.snapshot import SessionSnapshot
from tether.errors import InvalidId
from tether.ids import validate_id
from tether.models.prices import Spend, spend_of, usage_by_model
from tether.producer.ops.console.backends import Backends
from tether.producer.ops.console.family_view import FamilyTree, family_tree
from tether.producer.ops.console.runs_view import (
    RunRow,
    active_sessions,
    queued_run_ids,
    read_runs,
)
from tether.producer.ops.console.timeline import RunTimeline, build_timeline
from tether.runs.contract import RunRef
from tether.runs.usage.policy import prices
from tether.runs.waits.children import PARENT_ATTRIBUTE
from tether.runs.waits.children_redis import family_key, parse_family

PAGE_SIZE = 50
#: Sessions examined for a status that needs their head (completed, waiting, failed...).
SCAN_LIMIT = 500
HEAD_READERS = 8


@dataclass(frozen=True)
class SessionRow:
    """One session: what Redis says now and what its head says last happened."""

    session_id: str
    state: str
    """``running`` (a worker holds it), ``queued`` (runs wait) or ``idle``."""
    queued: int
    last_status: str | None = None
    updated_at_ms: int | None = None
    last_seq: int | None = None
    parent_session_id: str | None = None

    @property
    def status(self) -> str:
        """What the list shows and filters on: the live state, else the last run's status."""
        if self.state != "idle":
            return self.state
        return (self.last_status or "new").lower()


@dataclass(frozen=True)
class SessionPage:
    """A page of the session list."""

    rows: list[SessionRow]
    matched: int
    truncated: bool


def _states(b: Backends, tenant: str, ids: list[str]) -> dict[str, tuple[str, int]]:
    pipe = b.client.pipeline(transaction=False)
    for session_id in ids:
        pipe.llen(b.keys.pending(tenant, session_id))
        pipe.exists(b.keys.lease(tenant, session_id))
    replies: list[Any] = pipe.execute() if ids else []
    out: dict[str, tuple[str, int]] = {}
    for session_id, length, leased in zip(ids, replies[::2], replies[1::2], strict=True):
        queued = int(length)
        state = "running" if leased and queued else "queued" if queued else "idle"
        out[session_id] = (state, queued)
    return out


def _heads(b: Backends, tenant: str, ids: list[str]) -> dict[str, SessionSnapshot | None]:
    with ThreadPoolExecutor(HEAD_READERS, thread_name_prefix="console-heads") as pool:
        heads = pool.map(lambda s: b.reader.read(s, tenant=tenant), ids)
        return dict(zip(ids, heads, strict=True))


def _row(session_id: str, state: tuple[str, int], head: SessionSnapshot | None) -> SessionRow:
    if head is None:
        return SessionRow(session_id, state[0], state[1])
    return SessionRow(
        session_id,
        state[0],
        state[1],
        last_status=head.applied[-1].status if head.applied else None,
        updated_at_ms=head.metadata.updated_at_ms,
        last_seq=head.last_seq,
        parent_session_id=head.metadata.parent_session_id,
    )


def list_sessions(b: Backends, tenant: str, *, query: str = "", status: str = "") -> SessionPage:
    """Sessions of ``tenant`` whose id contains ``query`` and whose status is ``status``."""
    ids = sorted(set(b.reader.list_session_ids(tenant)) | set(active_sessions(b, tenant)))
    if query:
        ids = [s for s in ids if query.lower() in s.lower()]
    states = _states(b, tenant, ids)
    wanted = status.lower()
    if wanted in ("running", "queued"):
        ids = [s for s in ids if states[s][0] == wanted]
    elif wanted:
        ids = [s for s in ids if states[s][0] == "idle"]
    scan = ids[:SCAN_LIMIT] if wanted else ids[:PAGE_SIZE]
    heads = _heads(b, tenant, scan)
    rows = [_row(s, states[s], heads[s]) for s in scan]
    if wanted:
        rows = [r for r in rows if r.status == wanted]
    truncated = len(ids) > len(scan) or len(rows) > PAGE_SIZE
    return SessionPage(rows[:PAGE_SIZE], len(ids), truncated)


@dataclass
class SessionDetail:
    """Everything the session page shows."""

    row: SessionRow
    head: SessionSnapshot | None
    timeline: list[RunTimeline]
    memory: MemorySnapshot
    last_seq: int
    queued_runs: list[RunRow] = field(default_factory=list)
    pending: tuple[PendingCall, ...] = ()
    waiting_agent: str | None = None
    spend: Spend | None = None
    """The committed model calls' tokens and cost (at this console's TETHER_MODEL_PRICES)."""
    waiting_run_id: str | None = None
    """The ``WAITING`` run the pending calls belong to (its cancel cancels them)."""
    waits: dict[str, str] = field(default_factory=dict)
    """What each call parked on the fleet waits for now, by call id (``children 2/3 (all)``)."""
    family: FamilyTree = field(default_factory=lambda: FamilyTree([]))
    """The children it spawned, and theirs (``ctx.spawn``)."""
    parent: dict[str, Any] | None = None
    """A child session's parent run (its ``tether.parent`` attribute: ``session_id``,
    ``run_id``, ...)."""


def session_detail(b: Backends, tenant: str, session_id: str) -> SessionDetail | None:
    """The session's page, or None when ``tenant`` has no such session."""
    try:
        validate_id(session_id)
    except InvalidId:
        return None
    state = _states(b, tenant, [session_id])[session_id]
    head = b.reader.read(session_id, tenant=tenant)
    if head is None and state[1] == 0:
        return None
    if head is not None:
        events = b.reader.events(session_id, tenant=tenant, include_live=True)
        committed = [e for e in events if e.seq <= head.last_seq]
        applied = head.applied
    else:
        events, committed, applied = b.stream.read(tenant, session_id), [], []
    detail = SessionDetail(
        row=_row(session_id, state, head),
        head=head,
        timeline=build_timeline(events, applied),
        memory=project_events(committed),
        last_seq=events[-1].seq if events else 0,
        queued_runs=read_runs(b, tenant, queued_run_ids(b, tenant, [session_id])),
        spend=spend_of(prices(b.settings), usage_by_model(committed)),
    )
    if applied and applied[-1].status == "WAITING":
        _add_pending(b, RunRef(tenant, session_id, applied[-1].run_id), detail)
    detail.family = family_tree(b, tenant, session_id, b.settings.max_child_depth)
    if head is not None:
        parent = head.metadata.attributes.get(PARENT_ATTRIBUTE)
        detail.parent = parent if isinstance(parent, dict) else None
    return detail


def _add_pending(b: Backends, ref: RunRef, detail: SessionDetail) -> None:
    """The calls the session's last run waits on, and its agent (for approve and answer)."""
    view = b.runs.get(ref)
    if view is None or view.tenant != ref.tenant or view.result is None:
        return
    detail.pending = view.result.pending
    detail.waiting_run_id = ref.run_id
    detail.waiting_agent = view.request.agent if view.request is not None else None
    parked = [p.wait_for for p in detail.pending if p.wait_for is not None]
    ended: dict[str, Any] = {}
    if any(w.kind == "children" for w in parked):
        raw = b.client.hgetall(family_key(b.keys, ref.tenant, ref.session_id))
        ended = parse_family(raw).ended
    detail.waits = {
        p.call_id: p.wait_for.reason(ended) for p in detail.pending if p.wait_for is not None
    }
