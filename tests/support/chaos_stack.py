"""A private stack for chaos, fault and security tests, separate from ``tests/support/stack.py``.

It owns everything it breaks: a password-protected redis-server (restarted by tests), a moto S3
server behind a :class:`~tests.support.fault_proxy.FaultProxy` (workers only ever see the proxy),
and three real Celery worker processes (killed, stopped and restarted by tests).

- :func:`open_chaos_stack` builds one (a context manager); :mod:`tests.chaos_report` uses it with
  the default lease settings.
- :func:`shared_chaos_stack` is the process-wide CI-sized stack (short leases) behind the
  fixtures of :mod:`tests.support.chaos_fixtures` (a test module opts in with
  ``pytest_plugins = ["tests.support.chaos_fixtures"]``).
"""

from __future__ import annotations

import atexit
import contextlib
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from tests.support.fault_proxy import FaultProxy
from tests.support.redis_scan import flatten_redis
from tests.support.stack import eventually, s3_reader, stack_env, unique
from tether.dev.moto_server import MotoServer
from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerFleet, WorkerProcess
from tether.persistence.reader import SessionLogReader
from tether.persistence.redis_conn import redis_from_url
from tether.producer.client import Producer
from tether.settings import Settings

#: Lease and sweep settings of the CI-sized stack (crash recovery in about 2.5 s).
SHORT_LEASE_TTL_MS = 2000
SHORT_SWEEP_INTERVAL_MS = 200
#: Tether's defaults (what the README's figures are measured with).
DEFAULT_LEASE_TTL_MS = 10_000
DEFAULT_SWEEP_INTERVAL_MS = 1000
BUCKET = "tether-chaos"
CELERY_PREFIX = "tether-celery:"


@dataclass
class ChaosStack:
    """Handles on a running chaos stack.

    Attributes:
        redis: the private, password-protected redis-server.
        password: its password (tests scan for it).
        moto_endpoint: moto's own URL (for checks that must not go through faults).
        proxy: the fault proxy; workers use ``proxy.url`` as their S3 endpoint.
        env: the workers' environment.
        settings: the settings of the test process's producer.
        fleet: the worker processes.
        producer: a producer on the stack.
        log_dir: where worker logs go.
    """

    redis: RedisServer
    password: str
    moto_endpoint: str
    proxy: FaultProxy
    env: dict[str, str]
    settings: Settings
    fleet: WorkerFleet
    producer: Producer
    log_dir: Path
    bucket: str = BUCKET
    extra_workers: list[WorkerProcess] = field(default_factory=list)

    @property
    def workers(self) -> list[WorkerProcess]:
        """The fleet's worker processes."""
        return self.fleet.workers

    # --- healing ------------------------------------------------------------------------------

    def heal(self) -> None:
        """Undo what a test may have broken: proxy faults, Redis down, workers dead or stopped,
        the bucket gone."""
        self.proxy.passthrough()
        client = self.s3_client()
        if self.bucket not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
            client.create_bucket(Bucket=self.bucket)
        if not self.redis.is_running:
            self.redis.start()
        for worker in self.workers:
            with contextlib.suppress(Exception):
                worker.signal(signal.SIGCONT)
        dead = [w for w in self.workers if not w.alive()]
        for worker in dead:
            worker.start(wait=False)
        for worker in dead:
            worker.wait_ready(90)

    # --- clients ------------------------------------------------------------------------------

    def redis_client(self) -> Any:
        """A new bytes client on the stack's session-state Redis (close it after use)."""
        return redis_from_url(self.settings.effective_redis_url)

    def broker_client(self) -> Any:
        """A new bytes client on the private redis-server (the broker; the state store too
        unless the stack was opened with another ``state_url``)."""
        return redis_from_url(self.redis.url)

    def reader(self) -> SessionLogReader:
        """A reader on the S3 data, straight to moto (never through the fault proxy)."""
        return s3_reader(self.bucket, self.moto_endpoint)

    def s3_client(self) -> Any:
        """A boto3 client straight to moto."""
        return boto3.client(
            "s3",
            endpoint_url=self.moto_endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def s3_objects(self, prefix: str = "") -> dict[str, bytes]:
        """Every object of the bucket (key -> bytes)."""
        client = self.s3_client()
        out: dict[str, bytes] = {}
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        ):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = client.get_object(Bucket=self.bucket, Key=obj["Key"])[
                    "Body"
                ].read()
        return out

    def redis_dump(self) -> dict[bytes, bytes]:
        """Every Redis key with its whole value flattened to bytes (for secret scans)."""
        client = self.redis_client()
        try:
            return flatten_redis(client)
        finally:
            client.close()

    def worker_logs(self) -> str:
        """The text of every worker log file of this stack."""
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob("*.log")))

    def secret_hits(self, needles: dict[str, bytes]) -> list[str]:
        """Where any of ``needles`` (name -> bytes) occurs: every S3 object, every Redis key
        (streams, run records and results, the task queue) and every worker log line."""
        hits: list[str] = []
        for name, data in self.s3_objects().items():
            hits += [f"S3 {name}: {what}" for what, n in needles.items() if n in data]
        for redis_key, value in self.redis_dump().items():
            hits += [f"Redis {redis_key!r}: {what}" for what, n in needles.items() if n in value]
        logs = self.worker_logs().encode()
        hits += [f"worker logs: {what}" for what, n in needles.items() if n in logs]
        return hits

    # --- observing workers ----------------------------------------------------------------------

    def broker_idle(self) -> bool:
        """True when the task queue is empty and no message is being processed."""
        client = self.broker_client()
        try:
            queued = client.llen(f"{CELERY_PREFIX}{self.settings.queue}")
            unacked = client.hlen(f"{CELERY_PREFIX}unacked")
        finally:
            client.close()
        return bool(queued == 0 and unacked == 0)

    def worker_of_pid(self, pid: int) -> WorkerProcess | None:
        """The fleet worker whose main process is ``pid`` or the parent of ``pid``."""
        for worker in self.workers + self.extra_workers:
            main = worker.pid
            if main is not None and (pid == main or parent_pid(pid) == main):
                return worker
        return None

    def running_worker(self, run_id: str) -> WorkerProcess | None:
        """The worker executing ``run_id`` right now (None when it is not running)."""
        view = self.producer.record(run_id)
        if view is None or view.status != "RUNNING":
            return None
        client = self.redis_client()
        try:
            raw = client.hget(self.producer.keys.run(*view.ref), "worker")
        finally:
            client.close()
        if raw is None:
            return None
        return self.worker_of_pid(int(raw.decode().split(":")[1]))

    def lease_of(self, tenant: str, session_id: str) -> tuple[str, int] | None:
        """The current lease ``(owner, fence)`` of a session."""
        client = self.redis_client()
        try:
            raw = client.get(self.producer.keys.lease(tenant, session_id))
        finally:
            client.close()
        if raw is None:
            return None
        owner, _, fence = raw.decode().rpartition("|")
        return owner, int(fence)

    def start_worker(self, name: str, env: dict[str, str], queue: str) -> WorkerProcess:
        """Start one more worker (its own environment and queue); stopped with the stack."""
        worker = WorkerProcess(name, env, self.log_dir, queue=queue)
        self.extra_workers.append(worker)
        worker.start()
        return worker

    @contextlib.contextmanager
    def queue_worker(self, queue: str, settings: dict[str, str]) -> Iterator[Producer]:
        """One more worker consuming ``queue`` with ``settings`` on top of the stack's
        environment, and a producer that submits to that queue; both stopped on exit."""
        env = {**self.env, **settings, "TETHER_QUEUE": queue}
        worker = self.start_worker(unique(queue), env, queue=queue)
        producer = Producer(self.settings.model_copy(update={"queue": queue}))
        try:
            yield producer
        finally:
            producer.close()
            worker.stop()
            self.extra_workers.remove(worker)


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None


def chaos_env(
    redis_url: str,
    s3_endpoint: str,
    *,
    lease_ttl_ms: int,
    sweep_interval_ms: int,
    freeze_dir: Path | None = None,
) -> dict[str, str]:
    """The workers' environment (the stack's one, with our lease settings; with ``freeze_dir``,
    the zombie-freeze probe of tests/support/chaos_freeze.py)."""
    env = stack_env(redis_url, s3_endpoint, BUCKET)
    env["TETHER_LEASE_TTL_MS"] = str(lease_ttl_ms)
    env["TETHER_SWEEP_INTERVAL_MS"] = str(sweep_interval_ms)
    if freeze_dir is not None:
        env["TETHER_AGENT_MODULES"] = "tests.support.chaos_freeze"
        env["CHAOS_FREEZE_DIR"] = str(freeze_dir)
    return env


@contextlib.contextmanager
def open_chaos_stack(
    log_dir: Path,
    *,
    workers: int = 3,
    lease_ttl_ms: int = SHORT_LEASE_TTL_MS,
    sweep_interval_ms: int = SHORT_SWEEP_INTERVAL_MS,
    state_url: str | None = None,
) -> Iterator[ChaosStack]:
    """Start Redis (with a random password), moto, the fault proxy and ``workers`` workers;
    with ``state_url`` (e.g. a ``redis+cluster://`` URL) the session state lives there and the
    private Redis is only the broker."""
    password = "pw-" + secrets.token_hex(16)
    redis_server = RedisServer(unix_socket=False, password=password).start()
    # moto in its own process: moto's state is per process, and other tests reset the one of the
    # test process (POST /moto-api/reset), which would wipe our bucket mid-session
    moto = MotoServer(log_dir).start()
    moto_endpoint = moto.endpoint
    proxy = FaultProxy(moto_endpoint).start()
    freeze_dir = log_dir / "freeze"
    freeze_dir.mkdir(parents=True, exist_ok=True)
    fleet: WorkerFleet | None = None
    producer: Producer | None = None
    stack: ChaosStack | None = None
    try:
        boto3.client(
            "s3",
            endpoint_url=moto_endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).create_bucket(Bucket=BUCKET)
        env = chaos_env(
            redis_server.url,
            proxy.url,
            lease_ttl_ms=lease_ttl_ms,
            sweep_interval_ms=sweep_interval_ms,
            freeze_dir=freeze_dir,
        )
        if state_url is not None:
            env["TETHER_REDIS_URL"] = state_url
        settings = Settings(
            broker_url=redis_server.url,
            redis_url=state_url or redis_server.url,
            store_url=f"s3://{BUCKET}/tether",
            s3_endpoint_url=moto_endpoint,
            lease_ttl_ms=lease_ttl_ms,
            sweep_interval_ms=sweep_interval_ms,
            max_input_bytes=int(env["TETHER_MAX_INPUT_BYTES"]),
            max_run_s=float(env["TETHER_MAX_RUN_S"]),
        )
        fleet = WorkerFleet(env, log_dir, count=workers, prefix="chaos")
        fleet.start()
        producer = Producer(settings)
        stack = ChaosStack(
            redis_server, password, moto_endpoint, proxy, env, settings, fleet, producer, log_dir
        )
        yield stack
    finally:
        if producer is not None:
            producer.close()
        if stack is not None:
            for worker in stack.extra_workers:
                worker.stop()
        if fleet is not None:
            fleet.stop()
        proxy.close()
        moto.stop()
        redis_server.close()


_shared: ChaosStack | None = None
_shared_exit: contextlib.ExitStack | None = None
_shared_lock = threading.Lock()


def close_shared_chaos_stack() -> None:
    """Stop the process-wide stack (no-op when none runs)."""
    global _shared, _shared_exit
    with _shared_lock:
        exit_stack, _shared_exit, _shared = _shared_exit, None, None
    if exit_stack is not None:
        exit_stack.close()


def shared_chaos_stack(log_dir: Path) -> ChaosStack:
    """The process-wide CI-sized stack (started on first use, stopped at exit)."""
    global _shared, _shared_exit
    with _shared_lock:
        if _shared is None:
            exit_stack = contextlib.ExitStack()
            _shared = exit_stack.enter_context(open_chaos_stack(log_dir))
            _shared_exit = exit_stack
            atexit.register(close_shared_chaos_stack)
        return _shared


def wait_broker_idle(stack: ChaosStack, timeout_s: float = 60.0) -> None:
    """Poll until no task message is queued or being processed."""
    eventually(stack.broker_idle, timeout_s=timeout_s, interval_s=0.1)


def drain_seconds(start: float) -> float:
    """Seconds since ``start`` (``time.monotonic()``)."""
    return time.monotonic() - start
