"""A run queued between a drain's claim (which found the queue empty) and its release.

The drain must take that run up, not spin: in CI a worker whose claim answered "queue empty"
(a duplicate message, a sweeper's drain) and whose release then found a newly queued run kept
asking the claim's answer again, so it held the session's lease forever and never ran the run
(``test_cluster_distributed.py::test_same_request_twice_is_applied_once`` timed out).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest
import redis

from tests.support.crash import (
    TENANT,
    Backends,
    memory_backends,
    real_backends,
    request_for,
    worker_runtime,
)
from tests.support.moto_server import S3TestBucket
from tether.runs.contract import RunRequest
from tether.runs.leases.base import Lease
from tether.runs.queue.base import IdleRelease, submit
from tether.worker.engine.claim_redis import RedisClaimer
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices

DRAIN_TIMEOUT_S = 30.0


class _QueuedBeforeRelease:
    """The runtime's run queue, with one request submitted right before the first
    ``release_if_idle``: the interleaving of a producer queueing a run while the drain is
    about to let the session go."""

    def __init__(self, inner: Any, late: RunRequest) -> None:
        self._inner = inner
        self._late: RunRequest | None = late

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def release_if_idle(self, lease: Lease) -> IdleRelease:
        if self._late is not None:
            late, self._late = self._late, None
            submit(self._inner, late)
        released: IdleRelease = self._inner.release_if_idle(lease)
        return released


def _runtime(backends: Backends, claimer: str, late: RunRequest) -> EngineServices:
    rt = worker_runtime(backends, "w")
    racing = _QueuedBeforeRelease(rt.runs, late)
    rt = dataclasses.replace(rt, runs=racing)  # type: ignore[arg-type]
    if claimer == "redis":
        inner = backends.runs
        cache = rt.head_cache is not None
        redis_claimer = RedisClaimer(inner.client, inner.keys, inner, head_cache=cache)  # type: ignore[attr-defined]
        rt = dataclasses.replace(rt, claimer=redis_claimer)
    return rt


@pytest.mark.parametrize("claimer", ["sequential", "redis"])
def test_a_run_queued_after_an_empty_claim_is_applied_not_spun_on(
    claimer: str, redis_client: redis.Redis, s3_bucket: S3TestBucket
) -> None:
    backends = (
        real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
        if claimer == "redis"
        else memory_backends()
    )
    sid = f"s-race-{claimer}"
    late = request_for(sid, "2+3")
    rt = _runtime(backends, claimer, late)
    processed: list[int] = []
    worker = threading.Thread(target=lambda: processed.append(drain(rt, TENANT, sid)), daemon=True)
    worker.start()
    worker.join(DRAIN_TIMEOUT_S)
    assert not worker.is_alive(), "the drain spun on a stale claim instead of taking the run"
    assert processed == [1]
    view = backends.runs.get(late.ref)
    assert view is not None and view.result is not None and view.result.output == "5"
    assert backends.leases.holder(TENANT, sid) is None  # released once the queue was empty
