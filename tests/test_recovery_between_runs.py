"""A worker that dies between two queued runs of a session (lease held, the next run never
started) is recovered after one lease TTL, not after the backlog patience of five (#19: the
corner case the reliability issue left open). In-process, on a real redis-server."""

from __future__ import annotations

import dataclasses
import time

import pytest
import redis

from tests.support.crash import (
    TENANT,
    PowerSwitch,
    SimulatedCrash,
    crash_at,
    real_backends,
    request_for,
    worker_runtime,
)
from tests.support.moto_server import S3TestBucket
from tether.runs.queue.base import RunState, submit
from tether.worker.engine.commit import CommitStep
from tether.worker.engine.cycle import drain
from tether.worker.engine.recovery import BACKLOG_PATIENCE, sweep_once

TTL_MS = 300


def test_a_holder_dead_between_two_runs_is_woken_after_one_ttl(
    redis_client: redis.Redis, s3_bucket: S3TestBucket
) -> None:
    backends = real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
    sid = "s-between"
    switch = PowerSwitch()
    dying = worker_runtime(backends, "dying", switch=switch)
    first, second = request_for(sid, "1+1"), request_for(sid, "2+2")
    submit(dying.runs, first)
    submit(dying.runs, second)
    with crash_at(CommitStep.FINISH, "after", "dying", switch), pytest.raises(SimulatedCrash):
        drain(dying, TENANT, sid)  # finishes the first run, dies before starting the second
    backends.expire_lease(TENANT, sid)
    view = backends.runs.get(second.ref)
    assert view is not None and view.status == RunState.QUEUED  # never started

    woken: list[tuple[str, str]] = []
    sweeper = worker_runtime(backends, "sweeper")
    sweeper = dataclasses.replace(
        sweeper,
        settings=sweeper.settings.model_copy(update={"lease_ttl_ms": TTL_MS}),
        wake=lambda t, s: woken.append((t, s)),
    )
    time.sleep(TTL_MS * 1.5 / 1000)  # one TTL without progress; far less than five
    assert TTL_MS * 1.5 < BACKLOG_PATIENCE * TTL_MS
    assert sweep_once(sweeper) == 1
    assert woken == [(TENANT, sid)]
    taker = worker_runtime(backends, "taker")
    assert drain(taker, TENANT, sid) == 1
    done = backends.runs.get(second.ref)
    assert done is not None and done.result is not None and done.result.output == "4"


def test_a_queued_run_of_a_cleanly_released_session_waits_for_its_message(
    redis_client: redis.Redis, s3_bucket: S3TestBucket
) -> None:
    """The backlog patience still holds when nobody died: a queued run whose message is on its
    way is not woken after one TTL (that would flood a busy queue with drains)."""
    backends = real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
    sid = "s-patient"
    rt = worker_runtime(backends, "w")
    submit(rt.runs, request_for(sid, "1+1"))
    drain(rt, TENANT, sid)  # released cleanly
    submit(rt.runs, request_for(sid, "2+2"))  # queued; its message is still in the broker
    sweeper = dataclasses.replace(
        rt, settings=rt.settings.model_copy(update={"lease_ttl_ms": TTL_MS}), wake=lambda t, s: None
    )
    time.sleep(TTL_MS * 1.5 / 1000)
    assert sweep_once(sweeper) == 0
