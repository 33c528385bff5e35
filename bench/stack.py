"""The benchmark stack: one private redis-server, one moto S3 server, Tether and baseline workers.

Everything measured in one run shares this stack: the same Redis is the Celery broker of both
apps (different queues and key prefixes), Tether's stream/lease/run-record store, and the result
backend of the baseline app; the same moto server holds Tether's heads and segments and the
hand-written task's session blobs (different key prefixes in one bucket).

moto runs as its own ``moto_server`` process (not ``ThreadedMotoServer``), so the S3 server does
not compete with the benchmark client for one interpreter's GIL.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3

from tether.dev.moto_server import MotoServer
from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerFleet, WorkerProcess
from tether.errors import ConfigurationError
from tether.producer.client import Producer
from tether.settings import Settings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

BUCKET = "tether-bench"
STORE_PREFIX = "tether"
TETHER_QUEUE = "tether"
BASELINE_QUEUE = "bench-baseline"
AGENT_MODULE = "bench.agents"
REPO_ROOT = Path(__file__).resolve().parent.parent
FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
}


class BaselineWorker(WorkerProcess):
    """A Celery worker of the baseline app (:mod:`bench.baselines`), same pool options."""

    def command(self) -> list[str]:
        """The worker command line, with ``-A bench.baselines`` instead of Tether's app."""
        cmd = super().command()
        cmd[cmd.index("tether.worker.app")] = "bench.baselines"
        return cmd


def start_moto(log_dir: Path, timeout_s: float = 30.0) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``moto_server`` on a loopback port it picks itself (see
    :meth:`tether.dev.moto_server.MotoServer.start`); return the process and its endpoint."""
    server = MotoServer(log_dir, start_timeout_s=timeout_s).start()
    assert server.proc is not None
    return server.proc, server.endpoint


def stop_process_group(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM a process started with ``start_new_session``, then SIGKILL its group."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.wait(timeout=timeout_s)


def s3_client(endpoint: str) -> S3Client:
    """A boto3 S3 client for the moto endpoint (fake credentials)."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def bench_env(redis_url: str, s3_endpoint: str, *, queue: str = TETHER_QUEUE) -> dict[str, str]:
    """The environment of every worker (Tether's and the baseline's) and of the appender.

    Tether keeps its production defaults (lease TTL, sweep interval, limits); only the locations
    and the benchmark's agent module are set.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "AWS_", "BENCH_"))}
    path = env.get("PYTHONPATH")
    env.update(FAKE_AWS)
    env.update(
        {
            "TETHER_BROKER_URL": redis_url,
            "TETHER_REDIS_URL": redis_url,
            "TETHER_STORE_URL": f"s3://{BUCKET}/{STORE_PREFIX}",
            "TETHER_S3_ENDPOINT_URL": s3_endpoint,
            "TETHER_QUEUE": queue,
            # JSON form: the comma form of a list setting is refused when read from the environment
            "TETHER_AGENT_MODULES": json.dumps([AGENT_MODULE]),
            "BENCH_BROKER_URL": redis_url,
            "BENCH_S3_ENDPOINT_URL": s3_endpoint,
            "BENCH_BUCKET": BUCKET,
            "PYTHONPATH": str(REPO_ROOT) + (os.pathsep + path if path else ""),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def bench_settings(
    redis_url: str, s3_endpoint: str, *, queue: str = TETHER_QUEUE, **overrides: Any
) -> Settings:
    """The producer-side settings matching :func:`bench_env` (plus ``overrides``)."""
    return Settings(
        broker_url=redis_url,
        redis_url=redis_url,
        store_url=f"s3://{BUCKET}/{STORE_PREFIX}",
        s3_endpoint_url=s3_endpoint,
        queue=queue,
        agent_modules=[AGENT_MODULE],
        **overrides,
    )


@dataclass
class BenchStack:
    """Handles on the running stack; :meth:`close` stops everything it started."""

    redis: RedisServer
    moto: subprocess.Popen[bytes]
    s3_endpoint: str
    env: dict[str, str]
    settings: Settings
    log_dir: Path
    tether: WorkerFleet
    baseline: list[BaselineWorker]
    producer: Producer
    extra_workers: list[WorkerProcess] = field(default_factory=list)

    @property
    def moto_log(self) -> Path:
        """moto's log: one line per S3 request (the request counts of P1 read it)."""
        return self.log_dir / "moto.log"

    @property
    def redis_url(self) -> str:
        """The one Redis URL (broker, Tether state, baseline results)."""
        return self.redis.url

    def start_tether_worker(
        self, name: str, queue: str, env_extra: dict[str, str] | None = None
    ) -> WorkerProcess:
        """Start one more (single-child prefork) Tether worker consuming ``queue``."""
        env = {**self.env, "TETHER_QUEUE": queue, **(env_extra or {})}
        worker = WorkerProcess(name, env, self.log_dir, concurrency=1, queue=queue)
        self.extra_workers.append(worker)
        return worker.start()

    def close(self) -> None:
        """Stop workers (all at once), the producer, moto and Redis, each even if one failed."""
        workers = [*self.tether.workers, *self.baseline, *self.extra_workers]
        for worker in workers:  # warm shutdowns take seconds each: let them overlap
            worker.signal(signal.SIGTERM)
        steps = [self.producer.close, *(w.stop for w in workers)]
        steps += [lambda: stop_process_group(self.moto), self.redis.close]
        for step in steps:
            with contextlib.suppress(Exception):
                step()


def start_stack(
    log_dir: Path,
    *,
    tether_workers: int = 2,
    baseline_workers: int = 2,
    env_extra: dict[str, str] | None = None,
) -> BenchStack:
    """Start Redis, moto (+ bucket), Tether's and the baseline's workers, and a producer.

    Every worker is a prefork worker with one pool child (``-c 1``), so "N worker processes"
    means N processes executing tasks on both sides. ``env_extra`` is added to every worker's
    environment (:mod:`bench.tail_profile` loads its probe with it).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    redis_server = RedisServer(unix_socket=False).start()
    moto: subprocess.Popen[bytes] | None = None
    fleet: WorkerFleet | None = None
    baseline: list[BaselineWorker] = []
    try:
        moto, endpoint = start_moto(log_dir)
        client = s3_client(endpoint)
        client.create_bucket(Bucket=BUCKET)
        env = {**bench_env(redis_server.url, endpoint), **(env_extra or {})}
        fleet = WorkerFleet(env, log_dir, count=tether_workers, prefix="tether")
        baseline = [
            BaselineWorker(f"baseline{i + 1}", env, log_dir, queue=BASELINE_QUEUE)
            for i in range(baseline_workers)
        ]
        # boot all in parallel: each interpreter start costs seconds on a small machine
        for worker in [*fleet.workers, *baseline]:
            worker.start(wait=False)
        for worker in [*fleet.workers, *baseline]:
            worker.wait_ready(120.0)
        settings = bench_settings(redis_server.url, endpoint)
        producer = Producer(settings)
        return BenchStack(
            redis_server, moto, endpoint, env, settings, log_dir, fleet, baseline, producer
        )
    except BaseException:
        if fleet is not None:
            fleet.stop()
        for worker in baseline:
            worker.stop()
        if moto is not None:
            stop_process_group(moto)
        redis_server.close()
        raise


def pool_children(pid: int) -> list[int]:
    """The child process ids of ``pid`` (a prefork worker's pool processes), from ``/proc``."""
    children: list[int] = []
    task_dir = Path(f"/proc/{pid}/task")
    with contextlib.suppress(FileNotFoundError):
        for task in task_dir.iterdir():
            with contextlib.suppress(FileNotFoundError):
                text = (task / "children").read_text()
                children.extend(int(c) for c in text.split())
    return sorted(set(children))


def cpu_s(pid: int, *, children: bool = True) -> float:
    """User + system seconds of ``pid`` so far (and of its living descendants: a prefork
    worker's pool children); 0 for a process that is gone."""
    import psutil  # only the benches that measure CPU pay its import

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)] if children else [root]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def rss_kib(pid: int) -> int:
    """The resident set size of ``pid`` in KiB (``VmRSS`` of ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise ConfigurationError(f"/proc/{pid}/status has no VmRSS line (a zombie?)")
