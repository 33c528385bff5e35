"""Queue depth, read from Redis at scrape time (a gauge nobody has to keep up to date).

Tether's own session queues are the truth about waiting work, whatever the broker: every
session with queued or running runs is in the ``active`` set, its queue is a list whose head
is the run being applied while the session's lease is held.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable
from dataclasses import dataclass

import redis
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tether.keys import RedisKeys
from tether.persistence.active_index import active_sessions
from tether.persistence.redis_conn import describe_client, translate_errors

#: At most this many active sessions are read per scrape (one pipelined round trip).
MAX_SESSIONS = 10_000


@dataclass(frozen=True)
class QueueDepth:
    """Queued and running runs, and active sessions, per tenant."""

    queued: dict[str, int]
    running: dict[str, int]
    sessions: dict[str, int]


def read_queue_depth(client: redis.Redis, keys: RedisKeys, tenant: str | None = None) -> QueueDepth:
    """Count runs waiting (queued, not started) and running, per tenant (``tenant`` only, when
    given).

    Raises:
        StreamUnavailable: Redis cannot be reached.
    """
    with translate_errors(describe_client(client)):
        sessions = active_sessions(client, keys, MAX_SESSIONS)[:MAX_SESSIONS]
        mine = [(t, s) for t, s in sessions if tenant is None or t == tenant]
        pipe = client.pipeline(transaction=False)
        for t, s in mine:
            pipe.llen(keys.pending(t, s))
            pipe.exists(keys.lease(t, s))
        replies = pipe.execute() if mine else []
    queued: Tally[str] = Tally()
    running: Tally[str] = Tally()
    active: Tally[str] = Tally()
    for (t, _s), length, leased in zip(mine, replies[::2], replies[1::2], strict=True):
        active[t] += 1
        in_flight = 1 if leased and int(length) > 0 else 0
        running[t] += in_flight
        queued[t] += int(length) - in_flight
    if tenant is not None:
        for counts in (queued, running, active):
            counts.setdefault(tenant, 0)
    return QueueDepth(dict(queued), dict(running), dict(active))


class QueueDepthCollector(Collector):
    """Exports ``tether_queue_depth``, ``tether_runs_running`` and ``tether_sessions_active``
    per tenant, read from Redis at each scrape."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, tenant: str | None = None) -> None:
        self._client = client
        self._keys = keys
        self._tenant = tenant

    def collect(self) -> Iterable[Metric]:
        depth = read_queue_depth(self._client, self._keys, self._tenant)
        yield _family(
            "tether_queue_depth",
            "Runs queued in session queues and not started yet, per tenant.",
            depth.queued,
        )
        yield _family("tether_runs_running", "Runs being applied now, per tenant.", depth.running)
        yield _family(
            "tether_sessions_active", "Sessions with queued or running runs.", depth.sessions
        )


def _family(name: str, documentation: str, values: dict[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=["tenant"])
    for tenant, value in sorted(values.items()):
        family.add_metric([tenant], value)
    return family
