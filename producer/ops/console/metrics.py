"""The console's ``/metrics``: the tenant's queue depth, the live workers and the fleet signals
(:mod:`tether.runs.fleet`), read from Redis at scrape time, plus the workers' own metrics when
they share this host's ``PROMETHEUS_MULTIPROC_DIR`` (as a ``tether up`` stack does)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from tether.observability.exposition import multiprocess_dir
from tether.observability.queue_depth import QueueDepthCollector
from tether.producer.ops.console.backends import Backends
from tether.runs.fleet import fleet_collector
from tether.runs.presence import list_workers


class WorkersCollector(Collector):
    """``tether_workers_alive``: worker process groups whose presence record is live."""

    def __init__(self, backends: Backends) -> None:
        self._b = backends

    def collect(self) -> Iterable[Metric]:
        alive = len(list_workers(self._b.client, self._b.keys))
        yield GaugeMetricFamily(
            "tether_workers_alive", "Worker process groups with a live presence record.", alive
        )


def console_registry(backends: Backends, tenant: str) -> CollectorRegistry:
    """What the console's ``/metrics`` exposes."""
    registry = CollectorRegistry(auto_describe=False)
    if multiprocess_dir():
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    registry.register(QueueDepthCollector(backends.client, backends.keys, tenant))
    registry.register(WorkersCollector(backends))
    registry.register(fleet_collector(backends.settings, backends.client))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The text exposition format."""
    return generate_latest(registry)
