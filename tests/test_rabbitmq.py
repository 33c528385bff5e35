"""A RabbitMQ broker URL works too (streams, leases and run records stay on Redis)."""

from __future__ import annotations

import os
from pathlib import Path

from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerFleet
from tether.producer.client import Producer
from tether.settings import Settings


def test_runs_over_a_rabbitmq_broker(rabbitmq_url: str, tmp_path: Path) -> None:
    store_url = f"file://{tmp_path}/store"
    with RedisServer(unix_socket=False) as redis_server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
        env.update(
            {
                "TETHER_BROKER_URL": rabbitmq_url,
                "TETHER_REDIS_URL": redis_server.url,
                "TETHER_STORE_URL": store_url,
            }
        )
        settings = Settings(
            broker_url=rabbitmq_url, redis_url=redis_server.url, store_url=store_url
        )
        with WorkerFleet(env, tmp_path, count=1), Producer(settings) as producer:
            assert producer.run("rq-1", "remember amqp", agent="notes", wait_s=60).output == (
                "noted: amqp"
            )
            assert producer.run("rq-1", "recall", agent="notes", wait_s=60).output == "amqp"
