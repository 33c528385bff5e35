"""A parent session's children as a tree, for its console page: each child (its session, agent
and status: queued, running, waiting, done, failed, cancelled) and its own children, down to
``TETHER_MAX_CHILD_DEPTH``, at most :data:`MAX_NODES` in all.

Read from the family records (``ctx.spawn`` writes a child there, its end is recorded there
once) and each child session's queue, lease and wait records: one pipelined round trip per
level of the tree, whatever its width. The family record forgets a child once no call waits on
it (its parent's wait settled), so the top level also reads the parent's head: the output of
each call that waited on children lists them as they ended (:func:`settled_children`). The
page's live feed reads it again every :data:`~tether.producer.ops.console.live.FAMILY_POLL_S`
and sends it when it changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tether.core.items import ToolOutput
from tether.producer.ops.console.backends import Backends
from tether.runs.waits.children_redis import family_key, parse_family

#: Children shown on one page, over every level (the rest are counted, not shown).
MAX_NODES = 100
ENDED = {"COMPLETED": "done", "FAILED": "failed", "CANCELLED": "cancelled"}
#: A child's status in its parent's call output while it has not ended (``children_output``).
IN_PROGRESS = "IN_PROGRESS"


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
    settled = settled_children(b, tenant, session_id)
    seen = {session_id}
    for _depth in range(max(1, max_depth)):
        nodes = [node for into, raw in level for node in _spawned(tree, into, raw)]
        if settled:  # the top level: children the record forgot, as the head says they ended
            named = {n.run_id for n in nodes}
            nodes += _add(tree, tree.children, [n for n in settled if n.run_id not in named])
            settled = []
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
    nodes: list[FamilyNode] = []
    by_time = sorted(family.spawned.values(), key=lambda s: (s.spawned_at_ms, s.child.session_id))
    for spawned in by_time:
        end = family.ended.get(spawned.child.run_id)
        status = ENDED.get(end.status, end.status.lower()) if end is not None else ""
        child = spawned.child
        nodes.append(FamilyNode(child.session_id, child.run_id, child.agent, status))
    return _add(tree, into, nodes)


def _add(tree: FamilyTree, into: list[FamilyNode], nodes: list[FamilyNode]) -> list[FamilyNode]:
    """``nodes`` added to ``into`` while the tree has room (the rest counted as hidden)."""
    room = max(0, MAX_NODES - tree.shown)
    added = nodes[:room]
    tree.shown += len(added)
    tree.hidden += len(nodes) - len(added)
    into.extend(added)
    return added


def settled_children(b: Backends, tenant: str, session_id: str) -> list[FamilyNode]:
    """The children that ended, as the outputs of the session's settled calls on children list
    them (its head's newest memory items: the family record forgot them once no call waited
    on them); newest call last, each child once."""
    stored = b.reader.store.load_shallow(tenant, session_id)
    if stored is None:
        return []
    found: dict[str, FamilyNode] = {}
    for item in stored.snapshot.memory.items:
        if isinstance(item, ToolOutput) and item.wait_for is None:
            for row in _children_rows(item.output):
                status = str(row["status"])
                if status != IN_PROGRESS:  # one still running is in the record, if anywhere
                    found[str(row["run_id"])] = FamilyNode(
                        str(row["session_id"]),
                        str(row["run_id"]),
                        str(row.get("agent", "")),
                        ENDED.get(status, status.lower()),
                    )
    return list(found.values())


def _children_rows(output: str) -> list[dict[str, Any]]:
    """The child rows of a call's output on children (``children_output``; none: another)."""
    if not output.startswith("{") or '"children"' not in output:
        return []
    try:
        doc = json.loads(output)
    except ValueError:
        return []
    rows = doc.get("children") if isinstance(doc, dict) and "total" in doc else None
    if not isinstance(rows, list):
        return []
    keys = ("run_id", "session_id", "status")
    return [r for r in rows if isinstance(r, dict) and all(k in r for k in keys)]
