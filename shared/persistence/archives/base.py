"""The event-archive seam: the durable, immutable history of committed events.

Committed events are written as segment objects named by their sequence range
(``<first:020d>-<last:020d>.json``); a segment is never overwritten: writing the same range again
with identical content is a no-op, with different content a :class:`VersionConflict`.
Implementations live in :mod:`tether.persistence.archives` (``memory``, ``local``, ``s3``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from tether.core.events import AgentEvent


@runtime_checkable
class EventArchive(Protocol):
    """Immutable event segments per session, scoped by tenant."""

    def write_segment(self, tenant: str, session_id: str, events: Sequence[AgentEvent]) -> None:
        """Store ``events`` (contiguous sequence numbers, ascending) as one immutable segment."""

    def read(self, tenant: str, session_id: str, *, after_seq: int = 0) -> list[AgentEvent]:
        """Every archived event with ``seq > after_seq``, in order, without gaps or duplicates."""

    def last_seq(self, tenant: str, session_id: str) -> int:
        """The highest archived sequence number (0 when none)."""

    def delete_session(self, tenant: str, session_id: str) -> int:
        """Delete every segment of a session; return how many were deleted."""
