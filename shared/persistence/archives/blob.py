"""The event archive written once over any :class:`tether.persistence.blobs.BlobBackend`."""

from __future__ import annotations

from collections.abc import Sequence

from tether.core.events import AgentEvent
from tether.errors import InvalidInput, VersionConflict
from tether.persistence.blobs import BlobBackend
from tether.persistence.codec import dumps_events, loads_events, sha256_hex
from tether.persistence.objects import (
    SEGMENT_KIND,
    check_segment_events,
    corrupt,
    events_dir,
    plan_segments,
    seal,
    segment_name,
    segment_names,
    unseal,
)


class BlobEventArchive:
    """A :class:`tether.persistence.archives.base.EventArchive` keeping each segment as one
    checksummed object.

    Segments are created with a create-only write; when the object exists already, its content
    hash decides between a no-op (same events) and a :class:`VersionConflict`.
    """

    def __init__(self, blobs: BlobBackend) -> None:
        """Args:
        blobs: the backend holding the objects.
        """
        self.blobs = blobs

    def write_segment(self, tenant: str, session_id: str, events: Sequence[AgentEvent]) -> None:
        prefix = events_dir(tenant, session_id)
        batch = list(events)
        first, last = check_segment_events(tenant, session_id, batch)
        key = prefix + segment_name(first, last)
        body = dumps_events(batch)
        data = seal(SEGMENT_KIND, body, first_seq=first, last_seq=last, count=len(batch))
        # Two rounds: the object may be deleted between the refused create and the read.
        for _ in range(2):
            try:
                self.blobs.put(key, data, expected=None)
                return
            except VersionConflict as exc:
                refusal = exc
            existing = self.blobs.get(key)
            if existing is None:
                continue
            where = self.blobs.describe(key)
            stored = unseal(existing.data, SEGMENT_KIND, where=where)
            if stored.header.get("sha256") == sha256_hex(body):
                return  # the same segment again: a retried archive step
            raise VersionConflict(
                f"event segment {where} already holds different events for seq {first}..{last}; "
                "archived events are immutable, so another writer committed a different "
                "history. Reload the session head and drop this attempt."
            ) from refusal
        raise VersionConflict(
            f"event segment {self.blobs.describe(key)} kept changing while being written; retry"
        )

    def read(self, tenant: str, session_id: str, *, after_seq: int = 0) -> list[AgentEvent]:
        prefix = events_dir(tenant, session_id)
        _check_seq(after_seq)
        plan = plan_segments(
            self.blobs.list_names(prefix), after_seq=after_seq, where=self._where(prefix)
        )
        out: list[AgentEvent] = []
        for name, (first, last) in plan:
            key = prefix + name
            blob = self.blobs.get(key)
            where = self.blobs.describe(key)
            if blob is None:
                raise VersionConflict(
                    f"event segment {where} disappeared while the archive was read (deleted "
                    "concurrently?); retry the read"
                )
            header, body = unseal(blob.data, SEGMENT_KIND, where=where)
            if (header.get("first_seq"), header.get("last_seq")) != (first, last):
                raise corrupt(SEGMENT_KIND, where, "its header range does not match its name")
            events = loads_events(body, where=where)
            if [e.seq for e in events] != list(range(first, last + 1)):
                raise corrupt(SEGMENT_KIND, where, f"it does not hold exactly seq {first}..{last}")
            for event in events:
                if event.tenant != tenant or event.session_id not in (None, session_id):
                    raise corrupt(
                        SEGMENT_KIND, where, f"event seq {event.seq} belongs to another session"
                    )
            out.extend(e for e in events if e.seq > after_seq)
        return out

    def last_seq(self, tenant: str, session_id: str) -> int:
        prefix = events_dir(tenant, session_id)
        plan = plan_segments(self.blobs.list_names(prefix), after_seq=0, where=self._where(prefix))
        return plan[-1][1].last_seq if plan else 0

    def delete_session(self, tenant: str, session_id: str) -> int:
        prefix = events_dir(tenant, session_id)
        # No contiguity check: deleting must work on a broken archive too.
        names = segment_names(self.blobs.list_names(prefix))
        return self.blobs.delete_many([prefix + name for name in names]) if names else 0

    def _where(self, prefix: str) -> str:
        return self.blobs.describe(prefix.rstrip("/"))


def _check_seq(after_seq: int) -> None:
    if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
        raise InvalidInput(f"after_seq must be an integer >= 0, got {after_seq!r}")
