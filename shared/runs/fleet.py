"""Fleet signals: how much work waits for a worker and how busy the workers are, read from Redis.

What an autoscaler (``tether autoscale``, a KEDA ``ScaledObject``) decides on, computed in a few
round trips whatever the backlog:

- **queued**: run messages waiting in each broker queue, not yet taken by a worker (``LLEN`` of
  the queue's lists, one per priority; see :func:`tether.runs.presence.queue_depth`);
- **oldest age**: how long the oldest of them has waited. kombu's Redis transport ``LPUSH``-es
  and ``BRPOP``-s, so the oldest message of a list is its tail: one ``LINDEX -1`` per list, whose
  request carries ``submitted_at_ms``;
- **in flight**, **busy slots**, **slots**: runs the live workers execute now, tasks they run,
  and their pool sizes, from the presence records (:mod:`tether.runs.presence`).

The broker counts need a Redis broker: with RabbitMQ, ``queued`` and the ages are left out.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, redis_from_url, translate_errors
from tether.runs.presence import PRIORITY_SUFFIXES, list_workers
from tether.settings import Settings

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


@dataclass(frozen=True)
class FleetSignals:
    """One reading of the fleet's load (see the module docstring)."""

    queued: dict[str, int] = field(default_factory=dict)
    """Broker messages waiting per queue (empty without a Redis broker)."""
    oldest_age_s: dict[str, float] = field(default_factory=dict)
    """Age of each queue's oldest waiting message (a queue with none waiting is absent)."""
    in_flight: int = 0
    busy_slots: int = 0
    slots: int = 0
    workers: int = 0
    read_at_ms: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``tether status --json``)."""
        return {
            "queued": self.queued,
            "oldest_queued_age_s": {q: round(a, 3) for q, a in self.oldest_age_s.items()},
            "runs_in_flight": self.in_flight,
            "busy_slots": self.busy_slots,
            "slots": self.slots,
            "workers": self.workers,
        }


def read_fleet_signals(
    state: redis.Redis,
    keys: RedisKeys,
    queues: Sequence[str],
    *,
    broker: redis.Redis | None,
    broker_namespace: str,
) -> FleetSignals:
    """Read the signals of the workers consuming ``queues``; ``broker`` is the Redis broker's
    client (None for another broker), ``state`` the client of the session state's Redis.

    Raises:
        StreamUnavailable: a Redis cannot be reached.
    """
    now_ms = int(time.time() * 1000)
    workers = [w for w in list_workers(state, keys) if set(w.queues) & set(queues)]
    queued: dict[str, int] = {}
    oldest: dict[str, float] = {}
    if broker is not None:
        queued, submitted = _broker_queues(broker, broker_namespace, queues)
        oldest = {q: max(0.0, (now_ms - ms) / 1000) for q, ms in submitted.items()}
    return FleetSignals(
        queued=queued,
        oldest_age_s=oldest,
        in_flight=sum(len(w.current_runs) for w in workers),
        busy_slots=sum(w.busy for w in workers),
        slots=sum(w.concurrency or 1 for w in workers),
        workers=len(workers),
        read_at_ms=now_ms,
    )


def _broker_queues(
    client: redis.Redis, namespace: str, queues: Sequence[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """Per queue: messages waiting, and the submission time (ms) of the oldest one."""
    lists = [(q, f"{namespace}-celery:{q}{sfx}") for q in queues for sfx in PRIORITY_SUFFIXES]
    with translate_errors(describe_client(client)):
        pipe = client.pipeline(transaction=False)
        for _, key in lists:
            pipe.llen(key)
            pipe.lindex(key, -1)
        replies = pipe.execute()
    depth = dict.fromkeys(queues, 0)
    oldest: dict[str, int] = {}
    for (queue, _), length, tail in zip(lists, replies[::2], replies[1::2], strict=True):
        depth[queue] += int(length)
        submitted = submitted_at_ms(tail) if tail is not None else None
        if submitted is not None:
            oldest[queue] = min(oldest.get(queue, submitted), submitted)
    return depth, oldest


def submitted_at_ms(raw: bytes | str) -> int | None:
    """The ``submitted_at_ms`` of the run request inside a kombu Redis message, or None when
    the message is no readable run message (another task, another encoding)."""
    try:
        envelope = json.loads(raw)
        body: Any = envelope["body"]
        if envelope.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        _args, kwargs, _embed = json.loads(body)
        request = kwargs["request"]
        if isinstance(request, str):
            request = json.loads(request)
        value = request["submitted_at_ms"]
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class FleetCollector(Collector):
    """Exports the fleet signals of ``queues`` at each scrape: ``tether_broker_queue_depth``,
    ``tether_oldest_queued_run_age_seconds`` (per queue), ``tether_runs_in_flight``,
    ``tether_worker_slots_busy`` and ``tether_worker_slots``.

    Every process that serves it exports the same fleet-wide values: aggregate with ``max``.
    """

    def __init__(
        self,
        state: redis.Redis,
        keys: RedisKeys,
        queues: Sequence[str],
        *,
        broker: redis.Redis | None,
        broker_namespace: str,
    ) -> None:
        self._read = (state, keys, tuple(queues), broker, broker_namespace)

    def collect(self) -> Iterable[Metric]:
        state, keys, queues, broker, namespace = self._read
        signals = read_fleet_signals(state, keys, queues, broker=broker, broker_namespace=namespace)
        depth = GaugeMetricFamily(
            "tether_broker_queue_depth",
            "Run messages waiting in the broker queue, not yet taken by a worker.",
            labels=["queue"],
        )
        age = GaugeMetricFamily(
            "tether_oldest_queued_run_age_seconds",
            "How long the oldest run message waiting in the broker queue has waited (0: none).",
            labels=["queue"],
        )
        for queue in queues if broker is not None else ():
            depth.add_metric([queue], signals.queued.get(queue, 0))
            age.add_metric([queue], signals.oldest_age_s.get(queue, 0.0))
        yield depth
        yield age
        yield GaugeMetricFamily(
            "tether_runs_in_flight", "Runs the live workers execute now.", signals.in_flight
        )
        yield GaugeMetricFamily(
            "tether_worker_slots_busy",
            "Pool slots of the live workers executing a task now.",
            signals.busy_slots,
        )
        yield GaugeMetricFamily(
            "tether_worker_slots", "Pool slots of the live workers (busy or free).", signals.slots
        )


def broker_client(settings: Settings, state: redis.Redis) -> redis.Redis | None:
    """The client of the Redis broker: ``state`` when broker and state share one Redis, a new
    client for another Redis broker, None for a broker that is no Redis (RabbitMQ)."""
    if settings.effective_broker_url == settings.effective_redis_url:
        return state
    if settings.effective_broker_url.startswith(_REDIS_SCHEMES):
        return redis_from_url(settings.effective_broker_url, retry=None)
    return None


def fleet_collector(settings: Settings, state: redis.Redis | None = None) -> FleetCollector:
    """The collector of the settings' queue (a client of the settings' Redis unless given)."""
    state = state if state is not None else redis_from_url(settings.effective_redis_url)
    return FleetCollector(
        state,
        RedisKeys(settings.namespace),
        [settings.queue],
        broker=broker_client(settings, state),
        broker_namespace=settings.namespace,
    )
