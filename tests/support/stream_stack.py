"""A fleet of 2 workers running the streaming agent of tests/support/stream_agents.py on its
own queue of the shared stack, with a small delta channel (``MAX_LEN`` pieces, ``TTL_S``
seconds), for the token-streaming tests (a pytest plugin: the ``streaming`` fixture)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from tests.support.stack import Stack
from tether.dev.workers import WorkerFleet
from tether.persistence.deltas import RedisDeltaChannel
from tether.persistence.redis_conn import redis_from_url
from tether.producer import Producer

QUEUE = "streamq"
MAX_LEN = 200
#: Long enough for a `tether tail` process to start and attach while a gated step waits: the
#: channel expires this long after its last piece, and beside two CPU hogs (make test-stress) the
#: tail took over 5 s to attach and found step 0's first pieces gone.
TTL_S = 20


@dataclass
class Streaming:
    """The streaming fleet, a producer on its queue, and the test's handles on Redis."""

    producer: Producer
    fleet: WorkerFleet
    client: redis.Redis
    prefix: str
    channel: RedisDeltaChannel
    env: dict[str, str]

    def open(self, token: str) -> None:
        """Let a stopped ``gate:``/``die:`` step go on."""
        self.client.set(f"{self.prefix}:{token}:open", 1)

    def midway(self, token: str) -> bool:
        """Whether the run of ``token`` stopped halfway through step 0."""
        return bool(self.client.exists(f"{self.prefix}:{token}:midway"))


@pytest.fixture(scope="session")
def streaming(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Streaming]:
    tmp = tmp_path_factory.mktemp("stream")
    prefix = f"st-{uuid.uuid4().hex[:6]}"
    env = dict(
        stack.env,
        TETHER_AGENT_MODULES="tests.support.stream_agents",
        TETHER_QUEUE=QUEUE,
        TETHER_DELTA_MAX_LEN=str(MAX_LEN),
        TETHER_DELTA_TTL_S=str(TTL_S),
        STREAM_TEST_REDIS_URL=stack.redis.url,
        STREAM_TEST_PREFIX=prefix,
    )
    producer = Producer(stack.settings.model_copy(update={"queue": QUEUE}))
    fleet = WorkerFleet(env, tmp, count=2, queue=QUEUE, prefix="stream")
    fleet.start()
    client = redis_from_url(stack.settings.effective_redis_url)
    try:
        channel = RedisDeltaChannel(client, producer.keys)
        yield Streaming(producer, fleet, client, prefix, channel, env)
    finally:
        fleet.stop()
        producer.close()
        client.close()
