"""Serving the metrics: the registry to expose, and a worker's ``/metrics`` HTTP endpoint.

A Celery prefork worker runs its tasks in pool processes, so each of them records into its own
files under ``PROMETHEUS_MULTIPROC_DIR`` and the main process serves their sum (prometheus
client's multiprocess mode). The directory must be set, and empty, before the worker starts:
the client picks its storage when it is first imported. ``tether worker --metrics-port`` makes
a fresh one; with ``celery -A tether.worker.app worker`` set it yourself.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from tether.errors import ConfigurationError

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> str | None:
    """The multiprocess directory, when this process records in multiprocess mode."""
    return os.environ.get(MULTIPROC_ENV) or None


class _ThisProcess(Collector):
    """Forwards this process's default registry (single-process mode)."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def build_registry(*extra: Collector) -> CollectorRegistry:
    """Tether's metrics, summed over every process of the multiprocess directory when one is
    set (else this process's), plus ``extra`` collectors (e.g. queue depth)."""
    registry = CollectorRegistry(auto_describe=False)
    if multiprocess_dir():
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_ThisProcess())
    for collector in extra:
        registry.register(collector)
    return registry


def check_port_free(host: str, port: int) -> None:
    """Fail now, with the fix, when ``host:port`` cannot be bound.

    Raises:
        ConfigurationError: the port is taken or the address is not this machine's.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc})"
            raise ConfigurationError(
                f"metrics address {host}:{port} {why}; choose another --metrics-port "
                "(TETHER_METRICS_PORT) or free it"
            ) from exc


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint (a daemon thread)."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        """The bound port (useful when started on port 0)."""
        return int(self.server.server_address[1])

    def close(self) -> None:
        """Stop serving and free the port."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_metrics(registry: CollectorRegistry, port: int, host: str = "127.0.0.1") -> MetricsServer:
    """Serve ``registry`` on ``http://host:port/metrics`` from a daemon thread.

    Raises:
        ConfigurationError: the address cannot be bound.
    """
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot serve metrics on {host}:{port} ({exc}); choose another --metrics-port "
            "(TETHER_METRICS_PORT) or free it"
        ) from exc
    return MetricsServer(server, thread)
