"""The fleet signals (:mod:`tether.runs.fleet`) on a private redis-server: real run messages a
Producer published to a queue no worker consumes, and presence records as workers write them;
read directly, through the Prometheus collector, and refused gracefully for foreign messages."""

from __future__ import annotations

import json
import time
from pathlib import Path

import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.stack import unique
from tether.keys import RedisKeys
from tether.producer import Producer
from tether.runs.fleet import fleet_collector, read_fleet_signals, submitted_at_ms
from tether.runs.presence import WorkerPresence, announce
from tether.settings import Settings

QUEUE = "signals"


def _presence(
    worker_id: str, queues: tuple[str, ...], slots: int, runs: tuple[str, ...]
) -> WorkerPresence:
    now = int(time.time() * 1000)
    return WorkerPresence(
        worker_id=worker_id, node=f"{worker_id}@h", hostname="h", pid=1, queues=queues,
        concurrency=slots, started_at_ms=now, last_seen_ms=now, current_runs=runs,
        busy=len(runs),
    )  # fmt: skip


def _settings(redis_url: str, tmp_path: Path) -> Settings:
    return Settings(broker_url=redis_url, store_url=f"file://{tmp_path}", queue=QUEUE)


def test_queued_messages_their_age_and_the_workers_slots(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    settings = _settings(redis_url, tmp_path)
    keys = RedisKeys(settings.namespace)
    before_ms = int(time.time() * 1000)
    with Producer(settings) as producer:
        for _ in range(5):
            producer.run_async(unique("sig"), "hi", agent="echo")
    after_ms = int(time.time() * 1000)
    for record in (
        _presence("a:1", (QUEUE,), 2, ("r1",)),
        _presence("b:2", (QUEUE, "other"), 4, ("r2", "r3", "r4")),
        _presence("c:3", ("other",), 8, ("r5",)),  # another queue's worker is not counted
    ):
        announce(redis_client, keys, record, expiry_ms=60_000)

    signals = read_fleet_signals(
        redis_client, keys, [QUEUE, "empty"], broker=redis_client, broker_namespace="tether"
    )
    assert signals.queued == {QUEUE: 5, "empty": 0}
    assert set(signals.oldest_age_s) == {QUEUE}  # a queue with nothing waiting has no age
    # the oldest message is one of this test's: it waited at most since just before the submit
    waited_ms = signals.read_at_ms - before_ms
    assert 0 <= signals.oldest_age_s[QUEUE] * 1000 <= waited_ms
    assert signals.oldest_age_s[QUEUE] * 1000 >= signals.read_at_ms - after_ms
    assert (signals.workers, signals.slots, signals.busy_slots, signals.in_flight) == (2, 6, 4, 4)

    shown = signals.to_dict()
    assert shown["queued"] == {QUEUE: 5, "empty": 0} and shown["slots"] == 6
    assert json.loads(json.dumps(shown)) == shown

    broker_free = read_fleet_signals(
        redis_client, keys, [QUEUE], broker=None, broker_namespace="tether"
    )
    assert broker_free.queued == {} and broker_free.oldest_age_s == {}  # RabbitMQ: unknown
    assert broker_free.busy_slots == 4


def test_the_collector_exports_every_signal(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    settings = _settings(redis_url, tmp_path)
    with Producer(settings) as producer:
        producer.run_async(unique("sig"), "hi", agent="echo")
    announce(
        redis_client,
        RedisKeys(settings.namespace),
        _presence("a:1", (QUEUE,), 3, ("r1",)),
        expiry_ms=60_000,
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(fleet_collector(settings, redis_client))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    assert samples[("tether_broker_queue_depth", (("queue", QUEUE),))] == 1
    assert samples[("tether_oldest_queued_run_age_seconds", (("queue", QUEUE),))] >= 0
    assert samples[("tether_runs_in_flight", ())] == 1
    assert samples[("tether_worker_slots_busy", ())] == 1
    assert samples[("tether_worker_slots", ())] == 3


def test_a_message_that_is_no_run_message_has_no_age(redis_client: redis.Redis) -> None:
    assert submitted_at_ms(b"not json") is None
    assert submitted_at_ms(json.dumps({"body": "e30=", "properties": {}})) is None
    body = json.dumps([[], {"request": {"submitted_at_ms": "soon"}}, {}])
    assert submitted_at_ms(json.dumps({"body": body, "properties": {}})) is None
    good = json.dumps([[], {"request": json.dumps({"submitted_at_ms": 1234})}, {}])
    assert submitted_at_ms(json.dumps({"body": good, "properties": {}})) == 1234
    # a foreign message at the head of the queue: counted, but no age is made up for it
    redis_client.lpush(f"tether-celery:{QUEUE}", b'{"body": "x"}')
    signals = read_fleet_signals(
        redis_client, RedisKeys(), [QUEUE], broker=redis_client, broker_namespace="tether"
    )
    assert signals.queued == {QUEUE: 1} and signals.oldest_age_s == {}
