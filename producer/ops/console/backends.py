"""The connections a console reads through: Redis (run records, streams, presence), the store
and archive (session heads and history), and, for actions, a Producer."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import redis

from tether.keys import RedisKeys
from tether.persistence.deltas.live_redis import RedisLiveFeed
from tether.persistence.deltas.redis import RedisDeltaChannel
from tether.persistence.reader import SessionLogReader
from tether.persistence.redis_conn import redis_from_url
from tether.persistence.streams.redis import RedisEventStream
from tether.persistence.writer_storage import open_writer_storage
from tether.producer.client import Producer
from tether.runs.queue.redis import RedisRunQueue
from tether.settings import Settings


@dataclass
class Backends:
    """Everything the console's views read, opened once per console process."""

    settings: Settings
    client: redis.Redis
    keys: RedisKeys
    runs: RedisRunQueue
    stream: RedisEventStream
    reader: SessionLogReader
    live: RedisLiveFeed
    _producer: Producer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def producer(self) -> Producer:
        """The Producer the actions go through (made on first use)."""
        with self._lock:
            if self._producer is None:
                self._producer = Producer(self.settings)
            return self._producer

    def close(self) -> None:
        """Close every connection."""
        with self._lock:
            if self._producer is not None:
                self._producer.close()
        self.client.close()


def open_backends(settings: Settings) -> Backends:
    """Connect to the deployment the settings name (no I/O until first use)."""
    client = redis_from_url(settings.effective_redis_url)
    keys = RedisKeys(settings.namespace)
    stream = RedisEventStream(
        client, keys=keys, max_len=settings.stream_max_len, retention_s=settings.stream_retention_s
    )
    store, archive = open_writer_storage(settings)  # its writes drop the cached head
    return Backends(
        settings=settings,
        client=client,
        keys=keys,
        runs=RedisRunQueue(client, keys, result_ttl_s=settings.result_ttl_s),
        stream=stream,
        reader=SessionLogReader(store, archive, stream),
        live=RedisLiveFeed(stream, RedisDeltaChannel(client, keys)),
    )
