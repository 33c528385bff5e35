"""The durable configuration of docs/durability.md: a state Redis on ``appendonly yes`` +
``appendfsync always``, killed (SIGKILL, as a crash or a power cut takes it) and restarted from
its AOF while runs commit, loses nothing that was acknowledged.

In-process drains (the real cycle) on a private redis-server with that configuration and S3 over
HTTP (moto). A step-durable 10-step run kills Redis from inside its 7th tool call: after the
restart the run's record, queue entry and step checkpoints are back, and the next worker resumes
it at its last checkpoint (11 model calls in all, not 7 + 11). Runs that finished before the kill
keep their results, and their request ids still apply them at most once. The same kill on a
Redis without persistence loses the queued run itself (``tests/test_faults.py`` covers what the
handle then does), so the AOF is what keeps a step acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.crash import TENANT, Backends, real_backends, worker_runtime
from tests.support.durable_agents import STEPS, MemoryCounter, counting_agent
from tests.test_durable_runs import counting_request
from tether.dev.redis_server import RedisServer
from tether.runs.contract import RunRequest
from tether.runs.queue.base import SubmitState, submit
from tether.runtime.registry import AgentRegistry
from tether.worker.engine.cycle import drain

DURABLE = {"appendonly": "yes", "appendfsync": "always"}


@pytest.fixture
def durable_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(unix_socket=False, extra_config={**DURABLE, "dir": str(tmp_path)})
    server.start()
    try:
        yield server
    finally:
        server.close()


def killing_registry(counter: MemoryCounter, server: RedisServer, kill_at: int | None) -> Any:
    def before_apply(n: int) -> None:
        if kill_at is not None and n == kill_at and server.is_running:
            server.kill()  # every write acknowledged so far must come back from the AOF

    registry = AgentRegistry({})
    registry.register(
        "counter", lambda: counting_agent(counter, durability="step", before_apply=before_apply)
    )
    return registry


def finish_one(backends: Backends, counter: MemoryCounter, sid: str) -> RunRequest:
    rt = worker_runtime(backends, "w0", registry=killing_registry(counter, None, None))  # type: ignore[arg-type]
    request = counting_request(sid)
    submit(rt.runs, request)
    drain(rt, TENANT, sid)
    return request


def test_a_redis_killed_mid_run_with_appendfsync_always_loses_no_acknowledged_step(
    durable_redis: RedisServer, s3_bucket: Any
) -> None:
    client = durable_redis.client()
    backends = real_backends(client, s3_bucket.bucket, s3_bucket.endpoint_url)
    done_counter = MemoryCounter()
    finished = finish_one(backends, done_counter, "s-before")  # acknowledged before the kill

    counter = MemoryCounter()
    request = counting_request("s-cut")
    dying = worker_runtime(backends, "w1", registry=killing_registry(counter, durable_redis, 7))
    submit(dying.runs, request)
    drain(dying, TENANT, request.session_id)  # Redis is gone under the run: it stops
    assert not durable_redis.is_running
    durable_redis.start()  # from its AOF
    backends.expire_lease(TENANT, request.session_id)  # the dead attempt's lease, as its TTL

    view = backends.runs.get(request.ref)
    assert view is not None and view.result is None  # still queued: the record came back
    checkpoint = backends.checkpoints.load(TENANT, request.session_id, request.run_id)
    assert checkpoint is not None  # the checkpoint of step 6 came back
    taker = worker_runtime(backends, "w2", registry=killing_registry(counter, durable_redis, None))
    submit(taker.runs, request)  # the broker redelivers the message
    drain(taker, TENANT, request.session_id)
    assert (counter.total, counter.model_calls) == (STEPS, STEPS + 1)  # no step redone
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None and view.result.status == "COMPLETED"

    before = backends.runs.get(finished.ref)
    assert before is not None and before.result is not None
    assert before.result.output == f"counted {STEPS}"
    again = submit(backends.runs, finished)  # its request id survived: applied at most once
    assert again.state is SubmitState.DUPLICATE
