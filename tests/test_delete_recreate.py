"""A deleted session's leftovers never steer the next session with the same id (issue 18, hole
3): after `sessions delete`, a re-created session whose worker dies between its head commit and
its first segment write loses nothing. Before the fix, the old incarnation's archive hint made
the next worker prune events that were in neither the head nor the archive."""

from __future__ import annotations

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
from tether.keys import RedisKeys
from tether.producer.sessions_admin import delete_session
from tether.runs.commit import CommitStep
from tether.runs.cycle import drain
from tether.runs.queue.base import submit


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
    with crash_at(CommitStep.ARCHIVE_SEGMENT, "before", "dying", switch), pytest.raises(
        SimulatedCrash
    ):
        apply(backends, "5+5", sid, worker="dying", switch=switch)
    backends.expire_lease(TENANT, sid)
    apply(backends, "6+6", sid)
    report = SessionLogReader(backends.store, backends.archive).verify(sid, tenant=TENANT)
    assert report.ok, report.problems
