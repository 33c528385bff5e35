"""Timers on real workers (2 Celery worker processes, so 2 sweepers), redis-server and S3 over
HTTP: a tool sleeps, the run ends WAITING and frees its worker, and the fleet goes on with it
when the time has passed, with no second submit by the client; one wake per timer; a cancel of
a sleeping run; a sleep over TETHER_MAX_WAIT_S refused, naming it, with nothing parked."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.agents_fleet import QUEUE, AgentsFleet
from tests.support.stack import Stack, eventually, finished, unique
from tests.test_cli import tether
from tether.core.events import AgentEvent
from tether.core.items import ToolOutput
from tether.core.results import RunStatus
from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerFleet
from tether.keys import RedisKeys
from tether.producer import AsyncProducer, Producer
from tether.runs.contract import RunResult
from tether.runs.queue.base import CancelOutcome
from tether.runs.waits.base import wake_request_id, wake_run_id
from tether.runs.waits.marks import BlobWaitMarks
from tether.runs.waits.redis import RedisWaitIndex


@pytest.fixture(scope="module")
def producer(stack: Stack, agents_fleet: AgentsFleet) -> Iterator[Producer]:
    """A producer on the shared fleet (two workers, so two sweepers) serving the sleeping agents."""
    with agents_fleet.producer(stack) as client:
        yield client


def _waits(stack: Stack) -> RedisWaitIndex:
    return RedisWaitIndex(stack.redis.client(), RedisKeys(stack.settings.namespace))


def test_a_sleeping_tool_frees_its_worker_and_the_fleet_goes_on(
    stack: Stack, producer: Producer
) -> None:
    sid = unique("nap")
    waiting = producer.run(sid, "nap 1", agent="sleeper", wait_s=60)
    assert waiting.status is RunStatus.WAITING
    (pending,) = waiting.pending
    assert pending.wait_for is not None and pending.wait_for.kind == "timer"
    woke = finished(producer, wake_run_id("default", sid, pending.call_id))
    assert woke.status is RunStatus.COMPLETED, woke
    assert woke.output is not None and woke.output.startswith('woke: {"slept_until"')
    head = stack.reader().read(sid)
    assert head is not None
    applied = [r.request_id for r in head.applied]
    assert (
        applied.count(wake_request_id("default", sid, pending.call_id)) == 1
    )  # 2 sweepers, 1 wake
    assert _waits(stack).records("default", sid) == []
    report = stack.reader().verify(sid)
    assert report.ok, report.problems


def test_cancelling_a_sleeping_run_ends_it_and_nothing_wakes_it(
    stack: Stack, producer: Producer
) -> None:
    sid = unique("nap-cancel")
    waiting = producer.run(sid, "nap 600", agent="sleeper", wait_s=60)
    (pending,) = waiting.pending
    assert producer.cancel(waiting.run_id) is CancelOutcome.REQUESTED
    cancelled = finished(producer, wake_run_id("default", sid, pending.call_id))
    assert cancelled.status is RunStatus.CANCELLED, cancelled
    assert _waits(stack).records("default", sid) == []
    head = stack.reader().read(sid)
    assert head is not None
    (output,) = [i for i in head.memory.items if isinstance(i, ToolOutput)]
    assert output.wait_for is None and '"Cancelled"' in output.output
    assert producer.cancel(waiting.run_id) is CancelOutcome.REQUESTED  # again: a duplicate


def test_a_sleep_over_the_longest_wait_is_refused_naming_it(
    stack: Stack, producer: Producer, tmp_path: Path
) -> None:
    sid = unique("nap-long")
    result = producer.run(sid, "nap 7200", agent="sleeper", wait_s=60)
    assert result.status is RunStatus.COMPLETED  # the call failed; the model saw why
    assert result.output is not None and "TETHER_MAX_WAIT_S" in result.output
    assert "3600 s" in result.output
    assert _waits(stack).records("default", sid) == []
    marks = BlobWaitMarks(stack.reader().store.blobs)  # type: ignore[attr-defined]
    assert marks.get("default", sid) is None


def test_sleeping_runs_resume_after_their_redis_is_flushed(stack: Stack, tmp_path: Path) -> None:
    """The run state lives in a Redis of this test's own (the broker stays the stack's): it is
    flushed while five runs sleep, and every one resumes once, from the marks and the heads."""
    state = RedisServer(unix_socket=False).start()
    queue, store_url = "waitsflushq", f"s3://{stack.bucket}/{unique('flush')}"
    env = dict(
        stack.env,
        TETHER_REDIS_URL=state.url,
        TETHER_STORE_URL=store_url,
        TETHER_AGENT_MODULES="tests.support.wait_agents",
        TETHER_QUEUE=queue,  # the default reconcile period (300 s): the flush itself is seen
    )
    fleet = WorkerFleet(env, tmp_path, count=2, queue=queue, prefix="wf")
    settings = stack.settings.model_copy(
        update={"queue": queue, "redis_url": state.url, "store_url": store_url}
    )
    client = Producer(settings)
    try:
        fleet.start()
        sids = [unique("flush") for _ in range(5)]
        waiting = [client.run(sid, "nap 3", agent="sleeper", wait_s=60) for sid in sids]
        assert all(w.status is RunStatus.WAITING for w in waiting)
        state.client().flushall()
        for sid, w in zip(sids, waiting, strict=True):
            woke = finished(client, wake_run_id("default", sid, w.pending[0].call_id))
            assert woke.status is RunStatus.COMPLETED, woke
    finally:
        client.close()
        fleet.stop()
        state.close()


def test_one_handle_follows_a_sleeping_run_to_its_end(stack: Stack, producer: Producer) -> None:
    handle = producer.run_async(unique("follow"), "nap 1", agent="sleeper")
    followed = handle.result(timeout=60, follow=True)
    assert followed.status is RunStatus.COMPLETED and followed.run_id != handle.run_id
    assert followed.output is not None and followed.output.startswith("woke: ")
    assert handle.result(timeout=60).status is RunStatus.WAITING  # the plain result stays


def test_a_stream_follows_a_sleeping_run_across_its_pause(stack: Stack, producer: Producer) -> None:
    handle = producer.run_async(unique("follow-stream"), "nap 1", agent="sleeper")
    items = list(handle.stream(idle_timeout_s=60, follow=True))
    results = [i for i in items if isinstance(i, RunResult)]
    assert [r.status for r in results] == [RunStatus.WAITING, RunStatus.COMPLETED]
    runs = [e.run_id for e in items if isinstance(e, AgentEvent)]
    assert handle.run_id in runs and results[1].run_id in runs  # both runs' events, in order
    assert runs.index(results[1].run_id) > max(i for i, r in enumerate(runs) if r == handle.run_id)


def test_the_async_handle_follows_too(stack: Stack, producer: Producer) -> None:
    async def follow() -> RunResult:
        settings = stack.settings.model_copy(update={"queue": QUEUE})
        async with AsyncProducer(settings) as client:
            handle = await client.run_async(unique("follow-aio"), "nap 1", agent="sleeper")
            return await handle.result(timeout=60, follow=True)

    followed = asyncio.run(follow())
    assert followed.status is RunStatus.COMPLETED
    assert followed.output is not None and followed.output.startswith("woke: ")


def test_tether_wait_follow_prints_the_end_of_the_chain(stack: Stack, producer: Producer) -> None:
    waiting = producer.run(unique("follow-cli"), "nap 1", agent="sleeper", wait_s=60)
    env = dict(stack.env, TETHER_QUEUE=QUEUE)
    plain = tether(env, "wait", waiting.run_id, "--json")
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout)["status"] == "WAITING"
    followed = tether(env, "wait", waiting.run_id, "--follow", "--wait-s", "60", "--json")
    assert followed.returncode == 0, followed.stderr
    assert json.loads(followed.stdout)["status"] == "COMPLETED"


def test_tether_status_shows_the_parked_calls(stack: Stack, producer: Producer) -> None:
    waiting = producer.run(unique("nap-status"), "nap 3000", agent="sleeper", wait_s=60)
    try:
        shown = tether(dict(stack.env, TETHER_QUEUE=QUEUE), "status", "--json")
        assert shown.returncode in (0, 1), shown.stderr  # 1: no local stack here, still shown
        parked = json.loads(shown.stdout)["parked"]
        assert parked["timed"] >= 1 and parked["next_due"].endswith("Z")
    finally:
        producer.cancel(waiting.run_id)


@pytest.mark.parametrize(
    ("policy", "status", "error"),
    [
        ("interrupt", RunStatus.INTERRUPTED, '"Interrupted"'),
        ("rollback", RunStatus.CANCELLED, '"Cancelled"'),
    ],
)
def test_a_newer_run_supersedes_a_sleeping_one(
    stack: Stack, producer: Producer, policy: str, status: RunStatus, error: str
) -> None:
    """``on_busy='interrupt'`` (or ``'rollback'``) on a session whose run sleeps: the parked
    call is settled with a tool error ahead of the newer run, the sleeping run's chain ends
    (``INTERRUPTED`` / ``CANCELLED``) and the newer run goes on; nothing wakes the call later."""
    sid = unique(f"nap-{policy}")
    waiting = producer.run(sid, "nap 600", agent="sleeper", wait_s=60)
    (pending,) = waiting.pending
    newer = producer.run_async(sid, "nap 0.5", agent="sleeper", on_busy=policy)
    stopped = finished(producer, wake_run_id("default", sid, pending.call_id))
    assert stopped.status is status, stopped
    if status is RunStatus.INTERRUPTED:
        assert "on_busy='interrupt'" in (stopped.error_message or ""), stopped
    final = newer.result(timeout=60, follow=True)
    assert final.status is RunStatus.COMPLETED and (final.output or "").startswith("woke:")
    assert _waits(stack).records("default", sid) == []
    head = stack.reader().read(sid)
    assert head is not None
    (output,) = [
        i for i in head.memory.items if isinstance(i, ToolOutput) and i.call_id == pending.call_id
    ]
    assert output.wait_for is None and error in output.output
    assert f"superseded by run {newer.run_id}" in output.output


def _appended_bytes(client: redis.Redis, key: str) -> int:
    """What the entries of stream ``key`` cost written by appends, as a run leaves them."""
    twin = key + ":twin"
    entries: list[tuple[bytes, dict[Any, Any]]] = client.xrange(key)  # type: ignore[assignment]
    for entry_id, fields in entries:
        client.xadd(twin, fields, id=entry_id)
    size = int(client.memory_usage(twin, samples=0) or 0)
    client.delete(twin)
    return size


def test_a_parked_session_gives_back_its_stream_slack_and_a_late_follower_sees_it_all(
    stack: Stack, producer: Producer
) -> None:
    client = stack.redis.client()
    if int(str(client.info("server")["redis_version"]).split(".")[0]) < 7:
        pytest.skip("Redis before 7.0 keeps no room for appends in a stream: nothing to give back")
    sid = unique("nap-rest")
    waiting = producer.run(sid, "nap 3000", agent="sleeper", wait_s=60)
    try:
        assert waiting.status is RunStatus.WAITING
        key = RedisKeys(stack.settings.namespace).events("default", sid)
        appended = _appended_bytes(client, key)
        eventually(lambda: int(client.memory_usage(key, samples=0) or 0) < appended)
        # a handle that attaches after the park (and the compaction) sees every event once
        late = list(producer.handle(waiting.run_id).events(idle_timeout_s=30))
        assert [e.seq for e in late] == list(range(1, waiting.last_seq + 1))
        assert {e.run_id for e in late} <= {waiting.run_id, None}
    finally:
        producer.cancel(waiting.run_id)
        client.close()
