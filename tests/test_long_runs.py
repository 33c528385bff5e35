"""A run longer than 3x the broker's visibility timeout completes once.

kombu's Redis transport hands an unacknowledged message to another consumer once its visibility
timeout passes, while the first copy still runs. Each redelivery registers the same request
(a duplicate) and finds the session's lease held, so it does nothing; the lease heartbeat keeps
the run alive, and it is applied exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.stack import Stack, unique
from tether.core.events import EventType
from tether.core.results import RunStatus
from tether.dev.workers import WorkerFleet
from tether.producer import Producer
from tether.runs.contract import RUN_TASK

QUEUE = "longq"
VISIBILITY_S = 3
RUN_S = 11  # > 3 x the visibility timeout


@pytest.mark.slow  # a long variant: `make test-long` (keeps `make test` under 10 min)
def test_a_run_longer_than_three_visibility_timeouts_completes_once(
    live_stack: Stack, tmp_path: Path
) -> None:
    env = dict(
        live_stack.env, TETHER_QUEUE=QUEUE, TETHER_BROKER_VISIBILITY_TIMEOUT_S=str(VISIBILITY_S)
    )
    settings = live_stack.settings.model_copy(
        update={"queue": QUEUE, "broker_visibility_timeout_s": VISIBILITY_S}
    )
    sid = unique("long")
    fleet = WorkerFleet(env, tmp_path, count=2, queue=QUEUE, prefix="long")
    try:
        fleet.start()
        with Producer(settings) as producer:
            result = producer.run(sid, f"sleep {RUN_S}", agent="sleepy", wait_s=120)
    finally:
        fleet.stop()
    assert result.status is RunStatus.COMPLETED
    assert result.attempts == 1
    received = sum(
        line.count(f"{RUN_TASK}[{result.run_id}] received")
        for worker in fleet.workers
        for line in worker.log_text().splitlines()
    )
    assert received >= 2, "the broker never redelivered the message: the test proves nothing"
    reader = live_stack.reader()
    assert reader.verify(sid).ok
    history = reader.events(sid)
    finals = [e for e in history if e.type is EventType.FINAL_OUTPUT]
    assert len(finals) == 1
    head = reader.read(sid)
    assert head is not None and [r.run_id for r in head.applied] == [result.run_id]


def test_a_request_timeout_ends_that_run_only(live_stack: Stack) -> None:
    """``timeout_s`` is per request: checked at every step boundary, the run past it fails with
    ``RunTimeout`` and is rolled back; the next run of the session is unaffected."""
    sid = unique("timeout")
    producer = live_stack.producer
    late = producer.run_async(sid, "sleep 2", agent="sleepy", timeout_s=0.5).run_result(timeout=60)
    assert late.status is RunStatus.FAILED and late.error_type == "RunTimeout"
    on_time = producer.run(sid, "sleep 0.1", agent="sleepy", timeout_s=30, wait_s=60)
    assert on_time.status is RunStatus.COMPLETED
    reader = live_stack.reader()
    assert reader.verify(sid).ok
    head = reader.read(sid)
    assert head is not None
    texts = [getattr(i, "content", None) for i in head.memory.items]
    assert "sleep 2" not in texts and "sleep 0.1" in texts  # the late run left nothing
