"""The soak's private stack: redis-server, moto S3 in its own process, the prefork workers
(with the soak's retention settings) and one producer, started together and stopped together."""

from __future__ import annotations

import contextlib
import functools
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.soak.config import SoakConfig
from bench.stack import (
    BUCKET,
    bench_env,
    bench_settings,
    s3_client,
    start_moto,
    stop_process_group,
)
from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerProcess
from tether.producer.client import Producer
from tether.settings import Settings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@dataclass
class SoakStack:
    """Redis, moto, the workers and the producer of one soak."""

    redis: RedisServer
    moto: subprocess.Popen[bytes]
    s3_endpoint: str
    env: dict[str, str]
    settings: Settings
    workers: list[WorkerProcess]
    producer: Producer
    log_dir: Path

    def s3_client(self) -> S3Client:
        """A boto3 client on moto (fake credentials)."""
        return s3_client(self.s3_endpoint)


@contextlib.contextmanager
def open_soak_stack(config: SoakConfig, log_dir: Path) -> Iterator[SoakStack]:
    """Start redis-server, moto and the workers with the soak's retention; stop them after."""
    log_dir.mkdir(parents=True, exist_ok=True)
    redis_server = RedisServer(unix_socket=False).start()
    moto: subprocess.Popen[bytes] | None = None
    workers: list[WorkerProcess] = []
    producer: Producer | None = None
    try:
        moto, endpoint = start_moto(log_dir)
        s3_client(endpoint).create_bucket(Bucket=BUCKET)
        env = bench_env(redis_server.url, endpoint)
        retention = {
            "TETHER_RESULT_TTL_S": str(config.result_ttl_s),
            "TETHER_STREAM_RETENTION_S": str(config.stream_retention_s),
            # a run's live events must outlive it (the settings check); soak runs take ms
            "TETHER_MAX_RUN_S": str(config.stream_retention_s),
            "TETHER_ARCHIVE_BATCH_EVENTS": str(config.archive_batch_events),
        }
        env.update(retention)
        workers = [
            WorkerProcess(f"soak{i + 1}", env, log_dir, concurrency=config.concurrency)
            for i in range(config.workers)
        ]
        for worker in workers:  # boot in parallel: an interpreter start costs seconds
            worker.start(wait=False)
        for worker in workers:
            worker.wait_ready(120.0)
        settings = bench_settings(
            redis_server.url,
            endpoint,
            result_ttl_s=config.result_ttl_s,
            stream_retention_s=config.stream_retention_s,
            max_run_s=config.stream_retention_s,
            archive_batch_events=config.archive_batch_events,
        )
        producer = Producer(settings)
        yield SoakStack(redis_server, moto, endpoint, env, settings, workers, producer, log_dir)
    finally:
        for worker in workers:  # warm shutdowns take seconds each: let them overlap
            worker.signal(signal.SIGTERM)
        steps: list[Callable[[], object]] = [w.stop for w in workers]
        if producer is not None:
            steps.insert(0, producer.close)
        if moto is not None:
            steps.append(functools.partial(stop_process_group, moto))
        steps.append(redis_server.close)
        for step in steps:
            with contextlib.suppress(Exception):
                step()
