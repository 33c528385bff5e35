"""The sweeper's active-session index is writable by every tenant (docs/trust-model.md: each marks
its own sessions active), so nothing a tenant writes there may stop crash recovery for the
others: a member that names no session of its shard is removed, a shard turned into another type
is skipped, and a session that fails is skipped alone. Each test loses a run of acme's (its
worker dies mid-run) beside the hostile write, sweeps in-process on a real redis-server, and
checks that the run is still woken and completes.
"""

from __future__ import annotations

import dataclasses
import logging
import zlib

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
from tether.keys import ACTIVE_SHARDS, RedisKeys
from tether.runs.contract import RunRequest
from tether.runs.queue.base import RunState, submit
from tether.worker.engine.commit import CommitStep
from tether.worker.engine.cycle import drain
from tether.worker.engine.recovery import sweep_once

SID = "s-lost"


@pytest.fixture
def backends(redis_client: redis.Redis, s3_bucket: S3TestBucket) -> Backends:
    return real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)


def keys_of(backends: Backends) -> RedisKeys:
    keys: RedisKeys = backends.runs.keys
    return keys


def lose_a_run(backends: Backends, client: redis.Redis) -> RunRequest:
    """acme's run whose worker died mid-run (RUNNING, lease expired), marked active long ago so
    every sweep finds it stale at once."""
    switch = PowerSwitch()
    dying = worker_runtime(backends, "dying", switch=switch)
    request = request_for(SID, "6*7")
    submit(dying.runs, request)
    with crash_at(CommitStep.FINISH, "before", "dying", switch), pytest.raises(SimulatedCrash):
        drain(dying, TENANT, SID)
    backends.expire_lease(TENANT, SID)
    view = backends.runs.get(request.ref)
    assert view is not None and view.status == RunState.RUNNING
    keys = keys_of(backends)
    assert client.zadd(
        keys.active(TENANT, SID), {keys.active_member(TENANT, SID): 1}, xx=True, ch=True
    )
    return request


def sweep_and_finish(backends: Backends, request: RunRequest) -> None:
    """One sweep wakes exactly the lost session, and a worker then completes its run."""
    woken: list[tuple[str, str]] = []
    sweeper = dataclasses.replace(
        worker_runtime(backends, "sweeper"), wake=lambda t, s: woken.append((t, s))
    )
    assert sweep_once(sweeper) == 1
    assert woken == [(TENANT, SID)]
    assert drain(worker_runtime(backends, "taker"), TENANT, SID) == 1
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None and view.result.output == "42"


def other_shard(keys: RedisKeys, member: str) -> str:
    """A shard that is not ``member``'s."""
    own = zlib.crc32(member.encode()) % ACTIVE_SHARDS
    return keys.active_shard((own + 1) % ACTIVE_SHARDS)


def test_members_naming_no_session_of_their_shard_are_removed_and_recovery_goes_on(
    backends: Backends, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    lost = lose_a_run(backends, redis_client)
    keys = keys_of(backends)
    lost_shard = keys.active(TENANT, SID)
    junk: dict[str, list[bytes]] = {
        lost_shard: [b"junk", b"/", b"a/b/c", b"\xff\xfe/s-1", b"acme/bad id!"],
        # a valid name in a shard it does not belong to: no claim or forget would ever touch it
        other_shard(keys, "bob/s-1"): [b"bob/s-1"],
    }
    for shard, members in junk.items():
        redis_client.zadd(shard, dict.fromkeys(members, 0))  # older than any real session
    with caplog.at_level(logging.WARNING):
        sweep_and_finish(backends, lost)
    for shard, members in junk.items():
        left = {m for m in members if redis_client.zscore(shard, m) is not None}
        assert left == set(), f"still in {shard}: {left}"
    removals = [r for r in caplog.records if "removed" in r.getMessage()]
    assert len(removals) == sum(len(m) for m in junk.values())  # once each


def test_a_shard_of_another_type_is_skipped_and_the_other_shards_are_swept(
    backends: Backends, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    lost = lose_a_run(backends, redis_client)
    keys = keys_of(backends)
    poisoned = other_shard(keys, keys.active_member(TENANT, SID))
    redis_client.set(poisoned, "poison")  # what any tenant's write-only grant allows
    with caplog.at_level(logging.WARNING):
        sweep_and_finish(backends, lost)
        sweep_once(dataclasses.replace(worker_runtime(backends, "again"), wake=lambda t, s: None))
    warned = [r for r in caplog.records if poisoned in r.getMessage()]
    assert len(warned) == 1  # once, not every pass
    assert redis_client.get(poisoned) == b"poison"  # left for the operator, as the warning says


def test_one_session_that_fails_does_not_stop_the_recovery_of_the_others(
    backends: Backends, redis_client: redis.Redis
) -> None:
    lost = lose_a_run(backends, redis_client)
    keys = keys_of(backends)
    # bob's own keys are his to write: his queue turned into a string fails every read of it
    redis_client.set(keys.pending("bob", "s-evil"), "poison")
    redis_client.zadd(keys.active("bob", "s-evil"), {keys.active_member("bob", "s-evil"): 0})
    sweep_and_finish(backends, lost)
