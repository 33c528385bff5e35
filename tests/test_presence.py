"""Worker presence records and readers on a real private redis-server.

Real worker processes announcing themselves are covered by ``test_no_silent_hang.py``
(``test_no_warning_while_workers_consume``) and ``test_local_stack.py`` (``tether status``).
"""

from __future__ import annotations

import time
from pathlib import Path

import redis

from tests.support.stack import Stack, eventually, unique
from tether.keys import RedisKeys
from tether.producer.client import Producer
from tether.runs.presence import (
    Heartbeat,
    WorkerPresence,
    announce,
    list_workers,
    queue_depth,
    withdraw,
    worker_id_for,
    workers_for_queue,
)
from tether.settings import Settings

KEYS = RedisKeys("presence-test")


def _record(
    worker_id: str, queues: tuple[str, ...] = ("tether",), **extra: object
) -> WorkerPresence:
    now_ms = int(time.time() * 1000)
    fields: dict[str, object] = {
        "worker_id": worker_id,
        "node": f"{worker_id}@h",
        "hostname": "h",
        "pid": 1,
        "queues": queues,
        "started_at_ms": now_ms,
        "last_seen_ms": now_ms,
        **extra,
    }
    return WorkerPresence.model_validate(fields)


def test_announce_list_filter_and_withdraw(redis_client: redis.Redis) -> None:
    announce(redis_client, KEYS, _record("h:1", ("tether",), runs_done=3), expiry_ms=5000)
    announce(redis_client, KEYS, _record("h:2", ("other", "tether")), expiry_ms=5000)
    announce(redis_client, KEYS, _record("h:3", ("other",)), expiry_ms=5000)

    assert [w.worker_id for w in list_workers(redis_client, KEYS)] == ["h:1", "h:2", "h:3"]
    assert [w.worker_id for w in workers_for_queue(redis_client, KEYS, "tether")] == ["h:1", "h:2"]
    assert list_workers(redis_client, KEYS)[0].runs_done == 3
    assert list_workers(redis_client, RedisKeys("another-namespace")) == []

    withdraw(redis_client, KEYS, "h:1")
    assert [w.worker_id for w in workers_for_queue(redis_client, KEYS, "tether")] == ["h:2"]


def test_a_silent_worker_disappears_when_its_record_expires(redis_client: redis.Redis) -> None:
    announce(redis_client, KEYS, _record("h:9"), expiry_ms=300)
    assert len(list_workers(redis_client, KEYS)) == 1
    eventually(lambda: list_workers(redis_client, KEYS) == [], timeout_s=5)


def test_an_unreadable_record_is_skipped(redis_client: redis.Redis) -> None:
    announce(redis_client, KEYS, _record("h:1"), expiry_ms=5000)
    redis_client.set(KEYS.worker("h:2"), b"{not json")
    redis_client.zadd(KEYS.workers(), {"h:2": 1})
    assert [w.worker_id for w in list_workers(redis_client, KEYS)] == ["h:1"]


def test_heartbeat_refreshes_then_withdraws(redis_client: redis.Redis) -> None:
    beats: list[int] = []

    def snapshot() -> WorkerPresence:
        beats.append(1)
        return _record("h:7", runs_done=len(beats))

    beat = Heartbeat(redis_client, KEYS, snapshot, interval_s=0.05).start()
    try:
        assert list_workers(redis_client, KEYS)[0].runs_done == 1  # visible at once
        eventually(lambda: list_workers(redis_client, KEYS)[0].runs_done >= 3, timeout_s=5)
        assert 0 < redis_client.pttl(KEYS.worker("h:7")) <= 150  # three beats
    finally:
        beat.stop()
    assert list_workers(redis_client, KEYS) == []


def test_worker_ids_are_safe_key_parts() -> None:
    assert worker_id_for("my host{1}/x", 42) == "my-host-1--x:42"
    # every presence key in one slot: the worker id is outside the hash tag
    assert KEYS.worker(worker_id_for("node.example.com", 7)) == (
        f"{KEYS.prefix}:{{~workers}}:node.example.com:7"
    )


def test_queue_depth_counts_what_no_worker_took(redis_url: str, tmp_path: Path) -> None:
    settings = Settings(
        broker_url=redis_url, store_url=f"file://{tmp_path}", namespace="depth", queue="q1"
    )
    with Producer(settings) as producer:
        for _ in range(3):
            producer.run_async(unique("d"), "hi", agent="echo")
        assert queue_depth(producer.redis, "depth", ["q1", "q2"]) == {"q1": 3, "q2": 0}


def test_real_workers_announce_themselves_and_withdraw_on_warm_shutdown(
    live_stack: Stack,
) -> None:
    client, keys = live_stack.producer.redis, live_stack.producer.keys
    expected = {w.pid for w in live_stack.workers}

    def listed() -> dict[int, WorkerPresence]:
        # other records may be listed beside them on this shared stack: a worker an earlier test
        # killed (until its record expires), a worker another test started on the same Redis;
        # this test is about these workers' own records
        found = {w.pid: w for w in list_workers(client, keys)}
        assert expected <= set(found), f"live workers missing from {sorted(found)}"
        return found

    shown = listed()
    for worker in live_stack.workers:
        record = shown[worker.pid]
        assert record.node.startswith(f"{worker.name}@") and record.queues == ("tether",)
        assert record.concurrency == 1 and record.age_s() < 5
    leaving = live_stack.workers[1]
    worker_id = shown[leaving.pid].worker_id
    leaving.stop()  # SIGTERM: warm shutdown
    assert leaving.pid not in {w.pid for w in list_workers(client, keys)}
    # withdrawn at shutdown, not left to expire: an expiry would leave the index entry
    assert client.zscore(keys.workers(), worker_id) is None
