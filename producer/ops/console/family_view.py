"""A parent session's children as a tree, for its console page: each child (its session, agent
and status: queued, running, waiting, done, failed, cancelled) and its own children, down to
``TETHER_MAX_CHILD_DEPTH``, at most :data:`MAX_NODES` in all.

Read from the family records (``ctx.spawn`` writes a child there, its end is recorded there
once) and each child session's queue, lease and wait records: one pipelined round trip per
level of the tree, whatever its width. The page's live feed reads it again every
:data:`~tether.producer.ops.console.live.FAMILY_POLL_S` and sends it when it changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.producer.ops.console.backends import Backends
from tether.runs.waits.children_redis import family_key, parse_family

#: Children shown on one page, over every level (the rest are counted, not shown).
MAX_NODES = 100
ENDED = {"COMPLETED": "done", "FAILED": "failed", "CANCELLED": "cancelled"}


@dataclass
class FamilyNode:
    """One child run in the tree."""

    session_id: str
    run_id: str
    agent: str
    status: str
    children: list[FamilyNode] = field(default_factory=list)

    def doc(self) -> dict[str, Any]:
        """JSON-ready (the live feed's)."""
        return {
            "session_id": self.session_id,
            "run_id": self.run_id,
            "agent": self.agent,
            "status": self.status,
            "children": [c.doc() for c in self.children],
        }


@dataclass
class FamilyTree:
    """A session's children (empty: it spawned none) and how many were left out."""

    children: list[FamilyNode]
    hidden: int = 0
    shown: int = 0

    def doc(self) -> dict[str, Any]:
        """JSON-ready (the live feed's)."""
        return {"children": [c.doc() for c in self.children], "hidden": self.hidden}


def _read_level(b: Backends, tenant: str, session_ids: list[str]) -> list[Any]:
    """Per session: its family record, queue length, lease and wait records (one round trip)."""
    pipe = b.client.pipeline(transaction=False)
    for session_id in session_ids:
        pipe.hgetall(family_key(b.keys, tenant, session_id))
        pipe.llen(b.keys.pending(tenant, session_id))
        pipe.exists(b.keys.lease(tenant, session_id))
        pipe.exists(b.keys.session_waits(tenant, session_id))
    replies: list[Any] = pipe.execute()
    return [replies[i : i + 4] for i in range(0, len(replies), 4)]


def _live_status(queued: int, leased: int, parked: int) -> str:
    """A child that has not ended: what its session does now."""
    if leased and queued:
        return "running"
    if parked:
        return "waiting"
    return "queued" if queued else "starting"


def family_tree(b: Backends, tenant: str, session_id: str, max_depth: int) -> FamilyTree:
    """``session_id``'s children, and theirs, down to ``max_depth`` levels."""
    tree = FamilyTree([])
    (root,) = _read_level(b, tenant, [session_id])
    level: list[tuple[list[FamilyNode], Any]] = [(tree.children, root[0])]
    seen = {session_id}
    for _depth in range(max(1, max_depth)):
        nodes = [node for into, raw in level for node in _spawned(tree, into, raw)]
        if not nodes:
            break
        sessions = list(dict.fromkeys(n.session_id for n in nodes))
        states = dict(zip(sessions, _read_level(b, tenant, sessions), strict=True))
        level = []
        for node in nodes:
            raw_family, queued, leased, parked = states[node.session_id]
            if not node.status:
                node.status = _live_status(int(queued), int(leased), int(parked))
            if node.session_id not in seen:  # a session seen already is not read again
                seen.add(node.session_id)
                level.append((node.children, raw_family))
    return tree


def _spawned(tree: FamilyTree, into: list[FamilyNode], raw_family: Any) -> list[FamilyNode]:
    """The children a family record names, added to ``into`` (status: how each ended, or
    empty while it has not), while the tree has room."""
    if not raw_family:
        return []
    family = parse_family(raw_family)
    added: list[FamilyNode] = []
    by_time = sorted(family.spawned.values(), key=lambda s: (s.spawned_at_ms, s.child.session_id))
    for spawned in by_time:
        if tree.shown >= MAX_NODES:
            tree.hidden += 1
            continue
        tree.shown += 1
        end = family.ended.get(spawned.child.run_id)
        status = ENDED.get(end.status, end.status.lower()) if end is not None else ""
        child = spawned.child
        added.append(FamilyNode(child.session_id, child.run_id, child.agent, status))
    into.extend(added)
    return added
