"""A private distributed stack for tests: redis-server, moto S3 over HTTP, real Celery workers.

Session-scoped: the workers take seconds to boot, so tests share one stack and isolate
themselves with unique session ids. A test that kills a worker restarts it (see ``Stack``).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import boto3
import pytest

from tether.dev.moto_server import MotoServer
from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerFleet, WorkerProcess
from tether.persistence.reader import SessionLogReader
from tether.persistence.storage_url import open_storage
from tether.producer.client import Producer
from tether.runs.contract import RunResult
from tether.settings import Settings

T = TypeVar("T")

#: Short lease and sweep settings so crash-recovery tests finish in seconds.
LEASE_TTL_MS = 2000
SWEEP_INTERVAL_MS = 200


def eventually(condition: Callable[[], T], timeout_s: float = 30.0, interval_s: float = 0.05) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)


def finished(producer: Producer, run_id: str, timeout_s: float = 60.0) -> RunResult:
    """The result of the run ``run_id`` of tenant default, once it has one (a wake or a child
    run the fleet submitted: no handle to wait on); fail after ``timeout_s``."""

    def result() -> RunResult | None:
        view = producer.record(run_id)
        return view.result if view is not None else None

    return eventually(result, timeout_s=timeout_s)


def unique(prefix: str = "s") -> str:
    """A fresh session id."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@dataclass
class Stack:
    """Handles on the running stack."""

    redis: RedisServer
    s3_endpoint: str
    bucket: str
    env: dict[str, str]
    settings: Settings
    fleet: WorkerFleet
    producer: Producer
    log_dir: Path

    @property
    def workers(self) -> list[WorkerProcess]:
        """The worker processes."""
        return self.fleet.workers

    def ensure_workers(self) -> None:
        """Restart any worker a test killed or stopped."""
        for worker in self.workers:
            if not worker.alive():
                worker.start()

    def reader(self) -> SessionLogReader:
        """A reader over the stack's S3 store and archive."""
        return s3_reader(self.bucket, self.s3_endpoint)

    def s3_client(self) -> Any:
        """A boto3 S3 client on the stack's moto server."""
        return boto3.client(
            "s3",
            endpoint_url=self.s3_endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def s3_keys(self) -> list[str]:
        """Every object key in the bucket."""
        client = self.s3_client()
        keys: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
        return keys


def s3_reader(bucket: str, endpoint: str) -> SessionLogReader:
    """A reader over a test bucket's store and archive (fake credentials, moto endpoint)."""
    store, archive = open_storage(
        f"s3://{bucket}/tether",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return SessionLogReader(store, archive)


def stack_env(redis_url: str, s3_endpoint: str, bucket: str) -> dict[str, str]:
    """The environment of workers and producers of the test stack."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "AWS_"))}
    env.update(
        {
            "TETHER_BROKER_URL": redis_url,
            "TETHER_REDIS_URL": redis_url,
            "TETHER_STORE_URL": f"s3://{bucket}/tether",
            "TETHER_S3_ENDPOINT_URL": s3_endpoint,
            "TETHER_LEASE_TTL_MS": str(LEASE_TTL_MS),
            "TETHER_SWEEP_INTERVAL_MS": str(SWEEP_INTERVAL_MS),
            "TETHER_MAX_INPUT_BYTES": "65536",
            "TETHER_MAX_RUN_S": "60",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Redis + moto + 2 single-process prefork workers + a producer."""
    log_dir = tmp_path_factory.mktemp("stack")
    with start_stack(log_dir) as started:
        yield started


@contextlib.contextmanager
def start_stack(log_dir: Path, state_url: str | None = None) -> Iterator[Stack]:
    """Start a stack: a private redis-server (the broker, and the state store unless
    ``state_url`` names another Redis, e.g. a ``redis+cluster://`` one), moto, 2 workers."""
    redis_server = RedisServer(unix_socket=False).start()
    # its own process: moto's state is per process, and other tests reset the in-process one
    moto = MotoServer(log_dir).start()
    endpoint = moto.endpoint
    bucket = "tether-stack"
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket=bucket)
    env = stack_env(redis_server.url, endpoint, bucket)
    if state_url is not None:
        env["TETHER_REDIS_URL"] = state_url
    settings = Settings(
        broker_url=redis_server.url,
        redis_url=state_url or redis_server.url,
        store_url=f"s3://{bucket}/tether",
        s3_endpoint_url=endpoint,
        lease_ttl_ms=LEASE_TTL_MS,
        sweep_interval_ms=SWEEP_INTERVAL_MS,
        max_input_bytes=65536,
        max_run_s=60,
    )
    fleet = WorkerFleet(env, log_dir, count=2)
    producer: Producer | None = None
    try:
        fleet.start()
        producer = Producer(settings)
        yield Stack(redis_server, endpoint, bucket, env, settings, fleet, producer, log_dir)
    finally:
        if producer is not None:
            producer.close()
        fleet.stop()
        moto.stop()
        redis_server.close()


@pytest.fixture
def live_stack(stack: Stack) -> Stack:
    """The shared stack with every worker running."""
    stack.ensure_workers()
    return stack


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the workers' warnings and errors to the report of a failed stack test."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    funcargs = getattr(item, "funcargs", {})
    used = funcargs.get("live_stack") or funcargs.get("stack")
    if report.when == "call" and report.failed and isinstance(used, Stack):
        for worker in used.workers:
            lines = [
                line
                for line in worker.log_text().splitlines()
                if any(mark in line for mark in ("WARNING", "ERROR", "Error", "Traceback"))
                and "superuser" not in line
                and "security_error" not in line
            ]
            report.sections.append((f"worker {worker.name} log", "\n".join(lines[-60:])))
