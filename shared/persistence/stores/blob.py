"""The snapshot store written once over any :class:`tether.persistence.blobs.BlobBackend`."""

from __future__ import annotations

from tether.core.snapshot import SessionSnapshot
from tether.errors import InvalidInput
from tether.ids import validate_id
from tether.persistence.blobs import BlobBackend
from tether.persistence.codec import dumps_snapshot, loads_snapshot
from tether.persistence.objects import (
    EVENTS_DIR,
    HEAD_KIND,
    HEAD_NAME,
    check_limit,
    corrupt,
    head_key,
    seal,
    tenant_dir,
    unseal,
)
from tether.persistence.stores.base import StoredSnapshot


class BlobSnapshotStore:
    """A :class:`tether.persistence.stores.base.SnapshotStore` keeping each head as one checksummed
    object.

    Ids are validated before any I/O; the compare-and-set and the version tokens come from the
    backend (see :mod:`tether.persistence.blobs`).
    """

    def __init__(self, blobs: BlobBackend) -> None:
        """Args:
        blobs: the backend holding the objects.
        """
        self.blobs = blobs

    def load(self, tenant: str, session_id: str) -> StoredSnapshot | None:
        key = head_key(tenant, session_id)
        blob = self.blobs.get(key)
        if blob is None:
            return None
        where = self.blobs.describe(key)
        body = unseal(blob.data, HEAD_KIND, where=where).body
        snapshot = loads_snapshot(body, where=where)
        if snapshot.tenant != tenant or snapshot.session_id != session_id:
            raise corrupt(
                HEAD_KIND,
                where,
                f"it holds tenant {snapshot.tenant!r} session {snapshot.session_id!r} (was it "
                "copied from another location?)",
            )
        return StoredSnapshot(snapshot, blob.token)

    def save(self, snapshot: SessionSnapshot, expected_version: str | None) -> str:
        key = head_key(snapshot.tenant, snapshot.session_id)
        if expected_version is not None and not isinstance(expected_version, str):
            raise InvalidInput(
                f"expected_version must be a version string or None, got {expected_version!r}"
            )
        data = seal(HEAD_KIND, dumps_snapshot(snapshot))
        return self.blobs.put(key, data, expected=expected_version)

    def delete(self, tenant: str, session_id: str) -> bool:
        return self.blobs.delete(head_key(tenant, session_id))

    def list_session_ids(
        self, tenant: str, *, after: str | None = None, limit: int = 1000
    ) -> list[str]:
        prefix = tenant_dir(tenant)
        if after is not None:
            validate_id(after, kind="'after' session id")
        return self.blobs.list_children(
            prefix, HEAD_NAME, rollup=EVENTS_DIR, after=after, limit=check_limit(limit)
        )

