"""Administrative operations on stored sessions that need more than the offline reader."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from tether.errors import SessionBusy, SessionNotFound
from tether.ids import validate_id, validate_tenant
from tether.keys import RedisKeys
from tether.persistence.archives.base import EventArchive
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.persistence.stores.base import SnapshotStore


@dataclass(frozen=True)
class DeleteReport:
    """What :func:`delete_session` removed."""

    tenant: str
    session_id: str
    head_deleted: bool
    segments_deleted: int
    stream_keys_deleted: int


def delete_session(
    store: SnapshotStore,
    archive: EventArchive,
    client: redis.Redis,
    keys: RedisKeys,
    tenant: str,
    session_id: str,
) -> DeleteReport:
    """Delete a session: archive segments, then the head, then its live stream.

    The archive goes first so that a crash part-way leaves a head whose ``verify`` fails (and a
    second delete finishes the job) rather than stray segments that a new session with the same
    id would inherit. The fencing counter is kept, so a stale writer stays fenced out.

    Raises:
        SessionBusy: a worker holds the session's lease or runs are queued on it.
        SessionNotFound: there was nothing to delete.
    """
    validate_tenant(tenant)
    validate_id(session_id)
    names = keys.session(tenant, session_id)
    with translate_errors(describe_client(client)):
        busy = bool(client.exists(names.lease)) or int(client.llen(names.pending)) > 0
    if busy:
        raise SessionBusy(
            f"session {tenant}/{session_id} is running or has queued runs; wait for them or "
            "cancel them (`tether cancel RUN_ID`), then delete"
        )
    segments = archive.delete_session(tenant, session_id)
    head = store.delete(tenant, session_id)
    with translate_errors(describe_client(client)):
        stream_keys = int(client.delete(names.events, names.meta))
        # hints about the deleted incarnation must not steer a new session with the same id:
        # a stale archive hint would make it prune events it never archived
        client.delete(keys.archived(tenant, session_id), keys.checkpoints(tenant, session_id))
    if not head and not segments and not stream_keys:
        raise SessionNotFound(
            f"session {tenant}/{session_id} not found; list sessions with "
            f"'tether sessions list --tenant {tenant}'"
        )
    return DeleteReport(tenant, session_id, head, segments, stream_keys)
