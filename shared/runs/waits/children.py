"""The child-run seam: each parent session's children, as spawned and as they ended, and each
child session's link back to its parent run.

A worker that runs a parent's ``ctx.spawn`` records the child (:meth:`ChildBook.spawned`, in
the parent session's own keyspace) *before* it submits the child run; the child's session names
its parent in its head (metadata :data:`PARENT_ATTRIBUTE`, written by the child's first run). The
worker that finishes the child's run records how it ended (:meth:`ChildBook.ended`: once per
child, and only for a child the parent's record names, so a forged ``parent`` on a request
writes nothing), then wakes the parent when the parent's wait is over
(``tether.worker.engine.child_runs``). Once no parked call of the parent waits on an ended
child, its records are forgotten (:meth:`ChildBook.forget`): the record holds the children a
parent may still wait on or cancel, not the family's history (the heads hold that).

Format versions of :class:`SpawnedChild` and :class:`ChildLink` (field ``v``): 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict

from tether.core.children import ChildEnd
from tether.core.waits import ChildRef

#: The metadata attribute of a child's session naming its parent run (``session_id``,
#: ``run_id``, ``call_id``, ``depth``, ``child_run_id``), stored with its head.
PARENT_ATTRIBUTE = "tether.parent"


class SpawnedChild(BaseModel):
    """A child as its parent spawned it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    child: ChildRef
    parent_run_id: str
    call_id: str
    spawned_at_ms: int = 0


class ChildLink(BaseModel):
    """A child session's link to the run that spawned the child run it holds (as its request's
    ``parent`` or its head's :data:`PARENT_ATTRIBUTE` says)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    parent_session_id: str
    parent_run_id: str
    call_id: str
    child_run_id: str
    depth: int
    detached: bool = False


class Family(NamedTuple):
    """A parent session's children: as spawned and as ended, by child run id."""

    spawned: dict[str, SpawnedChild]
    ended: dict[str, ChildEnd]


class ChildBook(Protocol):
    """Where parents' children and their ends are recorded (one tenant's keyspace each)."""

    def spawned(self, tenant: str, parent_session_id: str, spawns: Sequence[SpawnedChild]) -> None:
        """Record spawned children with their parent; idempotent."""

    def ended(
        self, tenant: str, parent_session_id: str, end: ChildEnd, *, vouched: bool = False
    ) -> bool:
        """Record how a child ended, once (a second end of the same child is dropped); False
        when the parent's record names no such child (nothing written), unless ``vouched``
        (the parent's own wait names it: its record was lost with Redis)."""

    def family(self, tenant: str, parent_session_id: str) -> Family:
        """The parent session's children."""

    def forget(self, tenant: str, parent_session_id: str, child_run_ids: Sequence[str]) -> None:
        """Forget children (as spawned and as ended): no call of the parent waits on them."""


def cancellable(
    family: Family, run_ids: Sequence[str] = (), call_ids: Sequence[str] = ()
) -> list[ChildRef]:
    """The children to cancel with a parent: spawned by one of ``run_ids`` or ``call_ids``,
    not detached, and not ended."""
    return [
        s.child
        for run_id, s in family.spawned.items()
        if run_id not in family.ended
        and not s.child.detached
        and (s.parent_run_id in run_ids or s.call_id in call_ids)
    ]
