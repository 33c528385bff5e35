"""Durable marks of waiting sessions, beside their heads in the session store.

Redis holds the wait records and the timers index (:mod:`tether.runs.waits.redis`); a Redis that
was flushed or rolled back has lost them, while the sessions' heads (the truth: a parked call's
:class:`~tether.core.waits.WaitFor` is in memory) have not. A worker writes a session's mark
*before* the head that parks a call (so no committed wait is ever without one) and deletes it
after the head in which the session waits for nothing any more. Recovery lists the marks (one
listing, O(waiting sessions)), and for a session whose calls Redis does not know, reads its head
and parks its calls again (:mod:`tether.worker.engine.wait_reconcile`).

Key: ``waits/v1/<tenant>~<session>.json`` under the store's root (``~`` is refused in ids).
Format versions (field ``v``): 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from pydantic import BaseModel, ConfigDict

from tether.errors import VersionConflict
from tether.ids import is_valid_id
from tether.persistence.blobs import BlobBackend
from tether.runs.waits.base import WaitRecord

MARKS_PREFIX = "waits/v1/"


class WaitMark(BaseModel):
    """A waiting session and what its waits need to be woken (the records, as parked)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    tenant: str
    session_id: str
    records: tuple[WaitRecord, ...]
    written_at_ms: int


class BlobWaitMarks:
    """Marks as small objects of a store's blob backend."""

    def __init__(self, blobs: BlobBackend) -> None:
        self._blobs = blobs

    @staticmethod
    def _key(tenant: str, session_id: str) -> str:
        return f"{MARKS_PREFIX}{tenant}~{session_id}.json"

    def put(self, mark: WaitMark) -> None:
        """Write (or rewrite) a session's mark."""
        key = self._key(mark.tenant, mark.session_id)
        data = mark.model_dump_json().encode()
        for _ in range(3):  # an unconditional write over the backend's compare-and-set
            current = self._blobs.get(key)
            try:
                self._blobs.put(key, data, expected=None if current is None else current.token)
                return
            except VersionConflict:
                continue
        raise VersionConflict(f"wait mark {self._blobs.describe(key)} kept changing; retry")

    def delete(self, tenant: str, session_id: str) -> None:
        """Forget a session's mark (it waits for nothing)."""
        self._blobs.delete(self._key(tenant, session_id))

    def get(self, tenant: str, session_id: str) -> WaitMark | None:
        """A session's mark, if any."""
        blob = self._blobs.get(self._key(tenant, session_id))
        return None if blob is None else WaitMark.model_validate_json(blob.data)

    def sessions(self) -> Iterator[tuple[str, str]]:
        """Every marked ``(tenant, session)``."""
        for name in self._blobs.list_names(MARKS_PREFIX):
            stem = name.removesuffix(".json")
            tenant, _, session_id = stem.partition("~")
            if is_valid_id(tenant) and is_valid_id(session_id):
                yield tenant, session_id
