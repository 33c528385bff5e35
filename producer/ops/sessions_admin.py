"""Deleting one stored session everywhere it lives (archive segments, head, live stream and its
hints, run records, request ids), under the session's lease: what ``tether sessions delete`` and
the tenant purge (:mod:`tether.producer.ops.tenant_purge`) run."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import redis

from tether.errors import SessionBusy, SessionNotFound
from tether.ids import validate_id, validate_tenant
from tether.keys import RedisKeys
from tether.persistence.archives.base import EventArchive
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.persistence.stores.base import SnapshotStore
from tether.runs.leases.redis import RedisLeaseManager
from tether.runs.queue.record import RunField

#: How long the delete holds the session's lease: longer than any delete takes, and it is
#: released at once when the delete ends.
DELETE_LEASE_TTL_MS = 120_000
_SCAN_BATCH = 500


@dataclass(frozen=True)
class DeleteReport:
    """What :func:`delete_session` removed."""

    tenant: str
    session_id: str
    head_deleted: bool
    segments_deleted: int
    stream_keys_deleted: int
    runs_deleted: int = 0
    """Run records (with their request-id entries, cancel flags and attempt counters)."""


def delete_session(
    store: SnapshotStore,
    archive: EventArchive,
    client: redis.Redis,
    keys: RedisKeys,
    tenant: str,
    session_id: str,
) -> DeleteReport:
    """Delete a session: archive segments, head, live stream, run records and request ids.

    The session's lease is taken first, with a new fence: while the delete holds it no worker can
    start a run on the session, and a worker frozen with an older lease is fenced out of the
    stream and fails the head's compare-and-set (its head is gone), so it cannot bring part of
    the session back. The archive goes before the head so that a crash part-way leaves a head
    whose ``verify`` fails (and a second delete finishes the job) rather than stray segments that
    a new session with the same id would inherit. Afterwards an old run id is not found and an
    old request id is new.

    Raises:
        SessionBusy: a worker holds the session's lease or runs are queued on it.
        SessionNotFound: there was nothing to delete.
    """
    validate_tenant(tenant)
    validate_id(session_id)
    where = describe_client(client)
    leases = RedisLeaseManager(client, keys=keys)
    lease = leases.acquire(tenant, session_id, f"tether-delete:{os.getpid()}", DELETE_LEASE_TTL_MS)
    busy = SessionBusy(
        f"session {tenant}/{session_id} is running or has queued runs; wait for them or "
        "cancel them (`tether cancel RUN_ID`), then delete"
    )
    if lease is None:
        raise busy
    try:
        report = _delete_held(store, archive, client, keys, tenant, session_id, busy=busy)
    finally:
        with translate_errors(where):
            leases.release(lease)
    if not (
        report.head_deleted
        or report.segments_deleted
        or report.stream_keys_deleted
        or report.runs_deleted
    ):
        raise SessionNotFound(
            f"session {tenant}/{session_id} not found; list sessions with "
            f"'tether sessions list --tenant {tenant}'"
        )
    return report


def _delete_held(
    store: SnapshotStore,
    archive: EventArchive,
    client: redis.Redis,
    keys: RedisKeys,
    tenant: str,
    session_id: str,
    *,
    busy: SessionBusy,
) -> DeleteReport:
    """The delete itself, under the session's lease: the archive first, then the head, the
    live stream and its hints, and the run records."""
    where = describe_client(client)
    names = keys.session(tenant, session_id)
    with translate_errors(where):
        if int(client.llen(names.pending)) > 0:
            raise busy
    segments = archive.delete_session(tenant, session_id)
    head = store.delete(tenant, session_id)
    with translate_errors(where):
        stream_keys = int(client.delete(names.events, names.meta))
        # hints about the deleted incarnation must not steer a new session with the same
        # id: a stale archive hint would make it prune events it never archived
        client.delete(
            keys.archived(tenant, session_id),
            keys.checkpoints(tenant, session_id),
            keys.head_cache(tenant, session_id),
        )
        runs = _delete_runs(client, keys, tenant, session_id)
    return DeleteReport(tenant, session_id, head, segments, stream_keys, runs)


def _delete_runs(client: redis.Redis, keys: RedisKeys, tenant: str, session_id: str) -> int:
    """Delete the session's request-id entries and the run records they name.

    Every submitted run has a request-id entry under the session (same lifetime as its record),
    so scanning the session's entries finds every run record still alive.
    """
    pattern = keys.request(tenant, session_id, "x")[: -len("x")] + "*"
    deleted = 0
    batch: list[bytes] = []
    for name in client.scan_iter(match=pattern, count=_SCAN_BATCH):
        batch.append(name)
        if len(batch) >= _SCAN_BATCH:
            deleted += _delete_batch(client, keys, tenant, session_id, batch)
            batch = []
    if batch:
        deleted += _delete_batch(client, keys, tenant, session_id, batch)
    return deleted


def _delete_batch(
    client: redis.Redis, keys: RedisKeys, tenant: str, session_id: str, request_keys: list[bytes]
) -> int:
    """Delete the finished runs among ``request_keys``; a run submitted while the delete was
    under way is still queued (it waits for the lease) and belongs to the next incarnation."""
    replies = client.mget(request_keys)
    pipe = client.pipeline(transaction=False)
    named = [
        (key, r.decode() if isinstance(r, bytes) else str(r))
        for key, r in zip(request_keys, replies, strict=True)
        if r is not None
    ]
    for _, run_id in named:
        pipe.hmget(keys.run(tenant, session_id, run_id), [RunField.STATUS, RunField.RESULT])
        pipe.get(keys.run_index(tenant, run_id))
    records: list[Any] = pipe.execute()
    doomed: list[str | bytes] = []
    count = 0
    for (key, run_id), (status, result), indexed in zip(
        named, records[::2], records[1::2], strict=True
    ):
        if status is None or result is not None:  # expired record, or a finished run
            ref = (tenant, session_id, run_id)
            doomed += [key, keys.run(*ref), keys.cancel(*ref), keys.attempts(*ref)]
            if indexed == session_id.encode():  # the index entry is this session's, not a reuse
                client.delete(keys.run_index(tenant, run_id))
            count += 1
    if doomed:
        client.delete(*doomed)  # one slot: the session's
    return count
