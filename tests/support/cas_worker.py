"""A child-process body for the inter-process compare-and-set test of the local store."""

from __future__ import annotations

from tether.errors import VersionConflict
from tether.persistence.stores.local import LocalSnapshotStore


def increment_counter(root: str, tenant: str, session_id: str, times: int) -> int:
    """Add 1 to the head's ``attributes["counter"]`` ``times`` times; return the conflicts seen.

    Every increment is a load / modify / compare-and-set loop, so a lost update is only possible
    if two writers both win a save against the same version.
    """
    store = LocalSnapshotStore(root)
    conflicts = 0
    for _ in range(times):
        while True:
            stored = store.load(tenant, session_id)
            assert stored is not None, "the parent creates the head first"
            snapshot = stored.snapshot.copy_deep()
            counter = snapshot.metadata.attributes["counter"]
            assert isinstance(counter, int)
            snapshot.metadata.attributes["counter"] = counter + 1
            try:
                store.save(snapshot, stored.version)
                break
            except VersionConflict:
                conflicts += 1
    return conflicts
