"""A step boundary in one round trip: the events before a checkpoint and the checkpoint itself
go in one script (``stream_mark.lua``, :meth:`RedisEventStream.append_marked`), on a private
redis-server.

The script writes the checkpoint only once the whole batch is appended, so a checkpoint never
names an event the stream lacks; refused (fenced out, a gap), it writes neither. A step-durable
run on Redis then sends one script per boundary instead of an append and a save (the resume
tests of ``tests/test_durable_runs.py`` run on this path on Redis, as ``build_services`` builds
it).
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pytest
import redis

from tests.support.crash import TENANT, real_backends, worker_runtime
from tests.support.durable_agents import STEPS, MemoryCounter, counting_agent
from tests.test_durable_runs import counting_request, registry_for
from tether.core.events import AgentEvent, EventType, TextPayload
from tether.errors import FencedOut, StreamGap
from tether.ids import new_id
from tether.keys import RedisKeys
from tether.persistence.streams.redis import RedisEventStream, StreamMark
from tether.runs.queue.base import submit
from tether.runtime.registry import AgentRegistry
from tether.worker.engine.checkpoints.base import Checkpoint
from tether.worker.engine.checkpoints.redis import RedisCheckpointStore
from tether.worker.engine.cycle import drain

SID = "s-marks"


def ev(seq: int) -> AgentEvent:
    return AgentEvent(
        type=EventType.STEP_START,
        tenant=TENANT,
        session_id=SID,
        seq=seq,
        ts_ms=1_700_000_000_000 + seq,
        payload=TextPayload(text=f"e{seq}"),
    )


def mark(last_seq: int, fence: int = 3) -> StreamMark:
    body = Checkpoint(run_id="run-1", fence=fence, base_seq=0, last_seq=last_seq)
    return StreamMark("run-1", body.model_dump_json(), 60)


@pytest.fixture
def parts(redis_client: redis.Redis) -> tuple[redis.Redis, RedisEventStream, RedisCheckpointStore]:
    keys = RedisKeys(f"marks-{new_id('m')[-8:]}")
    redis_client.set(keys.fence(TENANT, SID), 3)  # the lease of fence 3 is the current one
    stream = RedisEventStream(redis_client, keys=keys)
    return redis_client, stream, RedisCheckpointStore(redis_client, keys, ttl_s=60)


def test_a_mark_writes_the_batch_and_the_checkpoint(parts: Any) -> None:
    _client, stream, checkpoints = parts
    assert stream.append_marked(TENANT, SID, [ev(1), ev(2)], 3, mark(2)) == 2
    assert [e.seq for e in stream.read(TENANT, SID)] == [1, 2]
    saved = checkpoints.load(TENANT, SID, "run-1")
    assert saved is not None and saved.last_seq == 2
    # an empty batch under the current fence records the checkpoint alone
    assert stream.append_marked(TENANT, SID, [], 3, mark(2, fence=3)) == 2


def test_a_fenced_out_mark_writes_neither(parts: Any) -> None:
    client, stream, checkpoints = parts
    client.incr(stream._keys.fence(TENANT, SID))  # a newer lease was granted (fence 4)
    with pytest.raises(FencedOut):
        stream.append_marked(TENANT, SID, [ev(1)], 3, mark(1))
    assert list(stream.read(TENANT, SID)) == []
    assert checkpoints.load(TENANT, SID, "run-1") is None


def test_a_mark_after_a_gap_writes_neither(parts: Any) -> None:
    _client, stream, checkpoints = parts
    stream.append(TENANT, SID, [ev(1)], 3)
    with pytest.raises(StreamGap):
        stream.append_marked(TENANT, SID, [ev(3)], 3, mark(3))
    assert [e.seq for e in stream.read(TENANT, SID)] == [1]
    assert checkpoints.load(TENANT, SID, "run-1") is None


def _scripts_run(client: redis.Redis) -> int:
    stats = cast(dict[str, dict[str, int]], client.info("commandstats"))
    return stats.get("cmdstat_evalsha", {}).get("calls", 0)


def test_a_step_durable_run_sends_one_script_per_boundary(
    redis_client: redis.Redis, s3_bucket: Any
) -> None:
    """Each of a tool step's three boundaries (calls recorded, the result, the step's end) was
    an append and a checkpoint save; marked, it is one script: 3 fewer per step than the same
    run on the same Redis with the two calls."""
    scripts: dict[bool, int] = {}
    for marked in (False, True):
        backends = real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
        counter = MemoryCounter()
        rt = worker_runtime(backends, "w1", registry=registry_for(counter, "step", None, None))
        rt = rt if marked else dataclasses.replace(rt, step_marks=None)
        request = counting_request(f"s-marked-{marked}")
        submit(rt.runs, request)
        before = _scripts_run(redis_client)
        drain(rt, TENANT, request.session_id)
        scripts[marked] = _scripts_run(redis_client) - before
        assert counter.total == STEPS
        assert backends.checkpoints.load(TENANT, request.session_id, request.run_id) is None
    assert scripts[True] <= scripts[False] - 3 * STEPS, scripts


def test_a_tool_call_is_on_the_stream_and_checkpointed_before_the_tool_runs(
    redis_client: redis.Redis, s3_bucket: Any
) -> None:
    """The ``TOOL_CALL`` events wait for the mark that follows them, and that mark comes before
    any tool runs: inside each tool, a live reader already sees the call, and the checkpoint
    already holds it."""
    backends = real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
    counter = MemoryCounter()
    request = counting_request("s-live")
    seen: list[tuple[int, int]] = []  # per tool call: TOOL_CALLs on the stream, checkpoint seq

    def look(n: int) -> None:
        events = backends.stream.read(TENANT, request.session_id)
        calls = sum(e.type is EventType.TOOL_CALL for e in events)
        checkpoint = backends.checkpoints.load(TENANT, request.session_id, request.run_id)
        assert checkpoint is not None and checkpoint.last_seq == events[-1].seq
        seen.append((n, calls))

    registry = AgentRegistry({})
    registry.register("counter", lambda: counting_agent(counter, before_apply=look))
    rt = worker_runtime(backends, "w1", registry=registry)
    submit(rt.runs, request)
    drain(rt, TENANT, request.session_id)
    assert seen == [(n, n) for n in range(1, STEPS + 1)]
