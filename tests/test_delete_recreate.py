"""A deleted session's leftovers never steer the next session with the same id (issue 18, hole
3): after `sessions delete`, a re-created session whose worker dies between its head commit and
its first segment write loses nothing. Before the fix, the old incarnation's archive hint made
the next worker prune events that were in neither the head nor the archive."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from tests.support.crash import (
    TENANT,
    Backends,
    PowerSwitch,
    SimulatedCrash,
    crash_at,
    real_backends,
    request_for,
    worker_runtime,
)
from tests.support.moto_server import S3TestBucket
from tether import SessionLogReader
from tether.core.items import UserMessage
from tether.errors import SessionBusy
from tether.keys import RedisKeys
from tether.producer.ops.sessions_admin import delete_session
from tether.runs.contract import RunRequest
from tether.runs.queue.base import SubmitState, submit
from tether.worker.engine.commit import CommitStep
from tether.worker.engine.cycle import drain


def apply(backends: Backends, text: str, sid: str, worker: str = "w", **kw: object) -> None:
    rt = worker_runtime(backends, worker, archive_batch_events=4, **kw)  # type: ignore[arg-type]
    request = request_for(sid, text)
    submit(rt.runs, request)
    drain(rt, TENANT, sid)


def test_a_recreated_session_ignores_the_deleted_ones_archive_hint(
    redis_client: redis.Redis, s3_bucket: S3TestBucket
) -> None:
    backends = real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
    sid = "s-reborn"
    for text in ("1+1", "2+2", "3+3", "4+4"):
        apply(backends, text, sid)
    assert backends.hint.archived_through(TENANT, sid) > 0
    keys: RedisKeys = backends.stream._keys
    delete_session(backends.store, backends.archive, redis_client, keys, TENANT, sid)
    switch = PowerSwitch()
    with (
        crash_at(CommitStep.ARCHIVE_SEGMENT, "before", "dying", switch),
        pytest.raises(SimulatedCrash),
    ):
        apply(backends, "5+5", sid, worker="dying", switch=switch)
    backends.expire_lease(TENANT, sid)
    apply(backends, "6+6", sid)
    report = SessionLogReader(backends.store, backends.archive).verify(sid, tenant=TENANT)
    assert report.ok, report.problems


def _requests(sid: str, texts: tuple[str, ...]) -> list[RunRequest]:
    return [request_for(sid, text) for text in texts]


def test_delete_removes_run_records_and_request_ids(
    redis_client: redis.Redis, s3_bucket: S3TestBucket
) -> None:
    """#19: after delete, an old run id is not found and an old request id is new."""
    backends = real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
    keys: RedisKeys = backends.stream._keys
    sid = "s-gone"
    rt = worker_runtime(backends, "w", archive_batch_events=4)
    old = _requests(sid, ("1+1", "2+2"))
    for request in old:
        submit(rt.runs, request)
        drain(rt, TENANT, sid)
    other = request_for("s-kept", "3+3")  # another session's runs stay
    submit(rt.runs, other)
    drain(rt, TENANT, "s-kept")
    assert all(backends.runs.get(r.ref) is not None for r in old)

    report = delete_session(backends.store, backends.archive, redis_client, keys, TENANT, sid)
    assert report.runs_deleted == 2
    for request in old:
        assert backends.runs.get(request.ref) is None  # not found
    left = {k.decode().rsplit(":", 1)[1] for k in redis_client.scan_iter(match=f"*{{*{sid}}}*")}
    assert left == {"fence", "released"}  # kept on purpose: a stale writer stays fenced out
    assert backends.runs.get(other.ref) is not None

    again = old[0].model_copy(update={"run_id": "run-reborn-1"})  # same request id, new session
    assert submit(rt.runs, again).state is SubmitState.QUEUED  # new, not a duplicate
    drain(rt, TENANT, sid)
    view = backends.runs.get(again.ref)
    assert view is not None and view.result is not None and view.result.status == "COMPLETED"
    assert view.result.duplicate is False
    head = SessionLogReader(backends.store, backends.archive).read(sid, tenant=TENANT)
    assert head is not None and [r.request_id for r in head.applied] == [again.request_id]


def test_delete_is_refused_while_a_worker_holds_the_session(
    redis_client: redis.Redis, s3_bucket: S3TestBucket
) -> None:
    backends = real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
    keys: RedisKeys = backends.stream._keys
    sid = "s-held"
    apply(backends, "1+1", sid)
    lease = backends.leases.acquire(TENANT, sid, "busy-worker", 60_000)
    assert lease is not None
    with pytest.raises(SessionBusy):
        delete_session(backends.store, backends.archive, redis_client, keys, TENANT, sid)
    assert backends.store.load(TENANT, sid) is not None  # nothing deleted


class _SlowArchive:
    """The archive, with a hook in the middle of a delete (after the lease, before the head)."""

    def __init__(self, archive: object, during_delete: Callable[[], None]) -> None:
        self._archive = archive
        self._during_delete = during_delete

    def __getattr__(self, name: str) -> object:
        return getattr(self._archive, name)

    def delete_session(self, tenant: str, session_id: str) -> int:
        deleted = self._archive.delete_session(tenant, session_id)  # type: ignore[attr-defined]
        self._during_delete()
        return int(deleted)


def test_a_racing_run_cannot_resurrect_a_deleted_session(
    redis_client: redis.Redis, s3_bucket: S3TestBucket
) -> None:
    """A run submitted while the delete is under way cannot start until the delete ends (the
    delete holds the session's lease), so it applies to a new, empty session: nothing of the
    deleted one comes back."""
    backends = real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
    keys: RedisKeys = backends.stream._keys
    sid = "s-race"
    apply(backends, "1+1", sid)
    rt = worker_runtime(backends, "racer", archive_batch_events=4)
    racing = request_for(sid, "2+2")
    drained: list[int] = []

    def race() -> None:
        submit(rt.runs, racing)
        drained.append(drain(rt, TENANT, sid))  # the delete holds the lease: nothing runs

    archive = _SlowArchive(backends.archive, race)
    delete_session(backends.store, archive, redis_client, keys, TENANT, sid)  # type: ignore[arg-type]
    assert drained == [0]
    assert backends.store.load(TENANT, sid) is None
    assert backends.stream.read(TENANT, sid) == []
    drain(rt, TENANT, sid)  # after the delete: the queued run goes on, on a new session
    reader = SessionLogReader(backends.store, backends.archive)
    head = reader.read(sid, tenant=TENANT)
    assert head is not None
    assert [i.content for i in head.memory.items if isinstance(i, UserMessage)] == ["2+2"]
    assert reader.verify(sid, tenant=TENANT).ok
