"""A worker's ``/metrics`` endpoint: prepared by ``tether worker --metrics-port``, started by
the worker's main process once its pool is up (see :mod:`tether.worker.tasks`).

The pool processes record into ``PROMETHEUS_MULTIPROC_DIR``, which must exist before the worker
process starts; ``tether worker`` makes a fresh directory (marked as Tether's, and removed at
shutdown) unless one is set already.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from prometheus_client.registry import Collector

from tether.keys import RedisKeys
from tether.observability.exposition import (
    MULTIPROC_ENV,
    MetricsServer,
    build_registry,
    check_port_free,
    multiprocess_dir,
    serve_metrics,
)
from tether.observability.queue_depth import QueueDepthCollector
from tether.observability.timed_waits import TimedWaitsCollector
from tether.persistence.redis_conn import redis_from_url
from tether.settings import Settings

log = logging.getLogger(__name__)

#: Present in a multiprocess directory Tether made (and may therefore delete).
OWNED_MARK = ".tether-owned"


def worker_metrics_env(settings: Settings, port: int | None) -> dict[str, str]:
    """The environment ``tether worker --metrics-port PORT`` adds for the Celery process: the
    port, and a fresh multiprocess directory unless ``PROMETHEUS_MULTIPROC_DIR`` is set.

    Raises:
        ConfigurationError: the port cannot be bound.
    """
    if port is None:
        return {}
    check_port_free(settings.metrics_host, port)
    env = {"TETHER_METRICS_PORT": str(port)}
    if not multiprocess_dir():
        directory = Path(tempfile.mkdtemp(prefix="tether-metrics-"))
        (directory / OWNED_MARK).touch()
        env[MULTIPROC_ENV] = str(directory)
    return env


def start_worker_metrics(
    settings: Settings, *, prefork: bool, collectors: Sequence[Collector] = ()
) -> MetricsServer | None:
    """Serve the worker's metrics (all its processes) plus queue depth and ``collectors`` (the
    fleet signals, which this layer cannot build), when ``TETHER_METRICS_PORT`` is set.

    Raises:
        ConfigurationError: the port cannot be bound.
    """
    if settings.metrics_port is None:
        return None
    if prefork and not multiprocess_dir():
        log.warning(
            "TETHER_METRICS_PORT is set but %s is not: the pool processes' metrics are missing; "
            "set it to an empty directory before starting the worker (tether worker "
            "--metrics-port does)",
            MULTIPROC_ENV,
        )
    client = redis_from_url(settings.effective_redis_url)
    keys = RedisKeys(settings.namespace)
    registry = build_registry(
        QueueDepthCollector(client, keys), TimedWaitsCollector(client, keys), *collectors
    )
    server = serve_metrics(registry, settings.metrics_port, settings.metrics_host)
    log.info("metrics on http://%s:%d/metrics", settings.metrics_host, server.port)
    return server


def remove_owned_multiprocess_dir() -> None:
    """Delete the multiprocess directory at shutdown when ``tether worker`` made it."""
    directory = multiprocess_dir()
    if directory and (Path(directory) / OWNED_MARK).exists():
        shutil.rmtree(directory, ignore_errors=True)
        os.environ.pop(MULTIPROC_ENV, None)
