"""What Celery's own tools (Flower, ``celery inspect``, worker logs) show for a run message: the
run, its session, tenant and agent, never the input. Read from the real broker message."""

from __future__ import annotations

import json

import redis

from tether.persistence.redis_conn import redis_from_url
from tether.producer import Producer
from tether.runs.contract import RUN_TASK
from tether.settings import Settings


def test_a_run_message_names_its_run_and_hides_its_input(redis_url: str) -> None:
    settings = Settings(broker_url=redis_url, redis_url=redis_url, namespace="celerytools")
    with Producer(settings) as producer:  # no worker: the message stays in the queue
        handle = producer.run_async("s-tools", "a private input", agent="echo", tenant="acme")
    client: redis.Redis = redis_from_url(redis_url)
    keys = [k for k in client.keys("celerytools-celery:*") if client.type(k) == b"list"]
    messages = [json.loads(raw) for key in keys for raw in client.lrange(key, 0, -1)]
    client.close()
    (message,) = [m for m in messages if m["headers"]["task"] == RUN_TASK]
    headers = message["headers"]
    assert headers["id"] == handle.run_id
    shown = headers["kwargsrepr"] + headers["argsrepr"]
    assert handle.run_id in shown and "acme/s-tools" in shown and "agent=echo" in shown
    assert "private" not in shown
