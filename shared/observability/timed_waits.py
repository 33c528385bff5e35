"""The calls parked on the fleet that it wakes at a time (timers, and the timeouts of signals
and children), read from the timers index at scrape time: how many, and the next due time."""

from __future__ import annotations

from collections.abc import Iterable

import redis
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, translate_errors


def read_timed_waits(client: redis.Redis, keys: RedisKeys) -> tuple[int, int | None]:
    """How many parked calls the timers index holds, and the earliest time one is due (Unix
    ms; None: none), in one pipelined round trip.

    Raises:
        StreamUnavailable: Redis cannot be reached.
    """
    shards = keys.timer_shards()
    with translate_errors(describe_client(client)):
        pipe = client.pipeline(transaction=False)
        for shard in shards:
            pipe.zcard(shard)
            pipe.zrange(shard, 0, 0, withscores=True)
        replies = pipe.execute()
    count = sum(int(n) for n in replies[::2])
    firsts = [int(first[0][1]) for first in replies[1::2] if first]
    return count, min(firsts) if firsts else None


class TimedWaitsCollector(Collector):
    """Exports ``tether_waits_timed`` (parked calls the fleet wakes at a time) and
    ``tether_waits_next_due_seconds`` (when the next is due, Unix seconds; absent: none)."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys

    def collect(self) -> Iterable[Metric]:
        count, next_ms = read_timed_waits(self._client, self._keys)
        yield GaugeMetricFamily(
            "tether_waits_timed",
            "Tool calls parked on the fleet that it wakes at a time (timers; timeouts of "
            "signals and children); tether_waits_parked and tether_waits_woken count them by "
            "reason.",
            value=count,
        )
        if next_ms is not None:
            yield GaugeMetricFamily(
                "tether_waits_next_due_seconds",
                "When the next parked call is due (Unix seconds).",
                value=next_ms / 1000,
            )
