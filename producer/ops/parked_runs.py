"""The runs parked on the fleet, for ``tether status``: the waiting sessions from their durable
marks in the session store (one listing, O(waiting sessions), at most
:data:`~tether.runs.waits.parked.MAX_LISTED`), their parked calls and what each waits for now
from Redis (:func:`~tether.runs.waits.parked.read_parked`: one round trip)."""

from __future__ import annotations

from typing import Any

from tether.keys import RedisKeys
from tether.settings import Settings


def parked_rows(settings: Settings, client: Any, keys: RedisKeys) -> list[dict[str, str]]:
    """One row per parked call: tenant, session, the run that parked it, the call, what it
    waits for (``timer due ...``, ``signal deployed``, ``children 1/3 (all)``) and its kind."""
    import redis

    from tether.persistence.storage_url import storage_from_settings
    from tether.persistence.stores.blob import BlobSnapshotStore
    from tether.runs.waits.marks import BlobWaitMarks
    from tether.runs.waits.parked import first, read_parked

    store, _archive = storage_from_settings(settings)
    if not isinstance(store, BlobSnapshotStore):
        return []
    sessions = first(BlobWaitMarks(store.blobs).sessions())
    try:
        calls = read_parked(client, keys, sessions)
    except redis.exceptions.NoPermissionError:  # a tenant's own Redis user: its sessions only
        calls = read_parked(client, keys, [s for s in sessions if s[0] == settings.tenant])
    return [
        {
            "tenant": c.record.tenant,
            "session_id": c.record.session_id,
            "run_id": c.record.run_id,
            "call_id": c.record.call_id,
            "kind": c.record.wait_for.kind,
            "for": c.reason,
        }
        for c in calls
    ]
