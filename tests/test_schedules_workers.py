"""Scheduled runs on real processes: two beat processes and a worker, a schedule every second,
the beat holding the lock killed midway; every tick that fired is exactly one run, applied once.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import redis

from tests.support.stack import eventually
from tether.core.events import EventType
from tether.core.results import RunStatus
from tether.dev.beat import BeatProcess
from tether.dev.workers import WorkerFleet
from tether.producer.client import Producer
from tether.producer.schedules import Schedules
from tether.settings import Settings

SESSION = "s-scheduled"
TICKS_BEFORE_KILL = 3
TICKS_AFTER_KILL = 3


def _request_ids(client: redis.Redis) -> dict[str, str]:
    """Request id -> run id, from the session's request-id index."""
    keys = client.keys(f"tether:{{default/{SESSION}}}:req:*")
    return {k.decode().split(":req:", 1)[1]: client.get(k).decode() for k in keys}  # type: ignore[union-attr]


def test_two_beats_and_a_worker_make_one_run_per_tick(redis_url: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    store = f"file://{tmp_path / 'store'}"
    env.update(
        {"TETHER_BROKER_URL": redis_url, "TETHER_REDIS_URL": redis_url, "TETHER_STORE_URL": store}
    )
    settings = Settings(broker_url=redis_url, redis_url=redis_url, store_url=store)
    client = redis.Redis.from_url(redis_url)
    fleet = WorkerFleet(env, tmp_path, count=1)
    beats = [BeatProcess(f"beat{i}", env, tmp_path) for i in (1, 2)]
    try:
        for process in [*fleet.workers, *beats]:
            process.start(wait=False)
        Schedules(settings).add("tick", session_id=SESSION, agent="echo", input="t", every_s=1)
        for process in [*fleet.workers, *beats]:
            process.wait_ready(90)
        holder: BeatProcess = eventually(
            lambda: next((b for b in beats if "Acquired lock" in b.log_text()), None), 60
        )
        eventually(lambda: len(_request_ids(client)) >= TICKS_BEFORE_KILL, 60)
        holder.kill()  # the other beat takes the lock over when it expires (5 x 1 s)
        fired_before = len(_request_ids(client))
        other = next(b for b in beats if b is not holder)
        eventually(lambda: len(_request_ids(client)) >= fired_before + TICKS_AFTER_KILL, 60)
        assert "Acquired lock" in other.log_text()
        Schedules(settings).pause("tick")
        requests = _request_ids(client)
        with Producer(settings) as producer:
            results = {
                rid: producer.handle(run).result(timeout=60) for rid, run in requests.items()
            }
            events = producer.event_stream.read("default", SESSION)
    finally:
        for beat in beats:
            beat.stop()
        fleet.stop()
    # one run per request id, and every request id is one tick of this schedule, on its grid
    assert len(set(requests.values())) == len(requests) >= TICKS_BEFORE_KILL + TICKS_AFTER_KILL
    ticks = sorted(int(rid.rsplit(":", 1)[1]) for rid in requests)
    assert all(rid.startswith("sched:tick:") for rid in requests)
    assert len(set(ticks)) == len(ticks)
    assert {r.status for r in results.values()} == {RunStatus.COMPLETED}
    # applied once each: one USER_INPUT per run in the session's log, and no other run
    inputs = collections.Counter(e.run_id for e in events if e.type == EventType.USER_INPUT)
    assert inputs == collections.Counter(set(requests.values()))
