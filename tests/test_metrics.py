"""Prometheus metrics scraped over HTTP from a real ``tether worker --metrics-port`` (prefork,
two pool processes: prometheus-client's multiprocess mode) and from ``tether console``.

The worker, its producer and the console use their own Redis namespace on the stack's
redis-server, so the stack's other workers (and their sweepers) never touch these runs.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.console import Console
from tests.support.stack import Stack, eventually, unique
from tether.core.results import RunStatus
from tether.dev.redis_server import free_port
from tether.dev.workers import WorkerProcess
from tether.producer.client import Producer
from tether.runs.leases.redis import RedisLeaseManager

QUEUE = "metered"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class MeteredWorker(WorkerProcess):
    """``tether worker --metrics-port PORT`` (the CLI path, which prepares multiprocess mode)."""

    def __init__(
        self,
        env: dict[str, str],
        log_dir: Path,
        port: int,
        *,
        queue: str = QUEUE,
        name: str = "mw",
        pool: int = 2,
    ) -> None:
        super().__init__(name, env, log_dir, concurrency=pool, queue=queue)
        self.metrics_port = port

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "tether.producer.ops.cli", "worker",
            "--metrics-port", str(self.metrics_port),
            "-c", str(self.concurrency), "-P", "prefork", "-n", f"{self.name}@%h",
            "-Q", self.queue, "-l", "INFO",
        ]  # fmt: skip


@dataclass
class Metered:
    worker: MeteredWorker
    producer: Producer
    console: Console
    env: dict[str, str]

    def scrape(self) -> Samples:
        return scrape(f"http://127.0.0.1:{self.worker.metrics_port}/metrics")


def scrape(url: str, **kwargs: str) -> Samples:
    """Every sample of a /metrics page, by name and labels."""
    response = httpx.get(url, timeout=10, headers=kwargs)
    response.raise_for_status()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


@pytest.fixture(scope="module")
def metered(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Metered]:
    log_dir = tmp_path_factory.mktemp("metered")
    namespace = f"mt-{uuid.uuid4().hex[:8]}"
    env = dict(stack.env, TETHER_NAMESPACE=namespace, TETHER_QUEUE=QUEUE)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # `tether worker` makes a fresh one
    worker = MeteredWorker(env, log_dir, free_port())
    producer = Producer(stack.settings.model_copy(update={"namespace": namespace, "queue": QUEUE}))
    console = Console(env, log_dir)
    try:
        worker.start()
        console.start()
        yield Metered(worker, producer, console, env)
    finally:
        console.stop()
        producer.close()
        worker.stop()


def test_worker_metrics_count_and_time_runs_across_pool_processes(metered: Metered) -> None:
    before = metered.scrape()
    producer = metered.producer
    quick = [producer.run_async(unique("m"), "hi", agent="echo") for _ in range(3)]
    for handle in quick:  # done before the gauges are read: the slow run is then the one running
        assert handle.run_result(timeout=30).status is RunStatus.COMPLETED
    sid = unique("m")
    # long enough to still run when the gauges are read on a loaded machine
    slow = producer.run_async(sid, "sleep 4", agent="sleepy")
    eventually(lambda: slow.running(), timeout_s=30)
    queued = producer.run_async(sid, "never", agent="echo")  # waits behind the slow run

    during = metered.scrape()
    assert value(during, "tether_queue_depth", tenant="default") == 1
    assert value(during, "tether_runs_running", tenant="default") == 1
    console = scrape(metered.console.url + "/metrics")  # the console reads the same Redis
    assert value(console, "tether_queue_depth", tenant="default") == 1
    assert value(console, "tether_runs_running", tenant="default") == 1
    assert value(console, "tether_workers_alive") == 1

    assert producer.cancel(queued.run_id).value == "cancelled"
    assert slow.run_result(timeout=30).status is RunStatus.COMPLETED
    assert queued.run_result(timeout=30).status is RunStatus.CANCELLED

    def moved() -> Samples | None:  # the finish of the last run is counted as it is announced
        after = metered.scrape()
        cancelled = delta(before, after, "tether_runs_finished_total", status="CANCELLED")
        return after if cancelled else None

    after = eventually(moved, timeout_s=10)
    assert delta(before, after, "tether_runs_finished_total", status="COMPLETED") == 4
    assert delta(before, after, "tether_runs_finished_total", status="CANCELLED") == 1
    # the cancelled run never started: only the four executed runs are timed
    assert delta(before, after, "tether_run_duration_seconds_count") == 4
    assert delta(before, after, "tether_queue_wait_seconds_count") == 4
    assert delta(before, after, "tether_run_duration_seconds_sum") >= 1.5  # the slow run slept
    assert value(after, "tether_queue_depth", tenant="default") == 0
    assert delta(before, after, "tether_lease_takeovers_total") == 0
    assert delta(before, after, "tether_commit_conflicts_total") == 0


def test_a_killed_pool_process_moves_the_recovery_and_takeover_counters(metered: Metered) -> None:
    before = metered.scrape()
    handle = metered.producer.run_async(unique("crash"), "sleep 2", agent="sleepy")
    eventually(handle.running, timeout_s=30)
    ref = metered.producer.locate(handle.run_id)
    assert ref is not None
    worker = metered.producer.runs.client.hget(metered.producer.keys.run(*ref), "worker")
    pid = int(worker.decode().split(":")[1])  # host:pid:thread of the pool process
    os.kill(pid, signal.SIGKILL)

    result = handle.run_result(timeout=60)
    assert result.status is RunStatus.COMPLETED and result.attempts == 2

    # the redelivered message and the sweeper race to recover it: either way, one takeover
    after = metered.scrape()
    assert delta(before, after, "tether_lease_takeovers_total") == 1
    assert delta(before, after, "tether_runs_finished_total", status="COMPLETED") == 1


def test_a_holder_dead_between_runs_is_counted_as_a_sweeper_recovery(metered: Metered) -> None:
    """The sweeper is the only way back for a session whose holder died between two runs: the
    run's message was consumed by a worker that found the lease held and left the run queued."""
    before = metered.scrape()
    producer = metered.producer
    sid = unique("orphan")
    leases = RedisLeaseManager(producer.redis, keys=producer.keys)
    ttl_ms = int(metered.env["TETHER_LEASE_TTL_MS"])
    assert leases.acquire("default", sid, "a-holder-that-dies", ttl_ms) is not None
    handle = producer.run_async(sid, "hi", agent="echo")  # never released: the holder "died"

    result = handle.run_result(timeout=60)
    assert result.status is RunStatus.COMPLETED and result.attempts == 1

    def recovered() -> Samples | None:
        samples = metered.scrape()
        return samples if delta(before, samples, "tether_recoveries_total") else None

    after = eventually(recovered, timeout_s=10)
    assert delta(before, after, "tether_recoveries_total") == 1
    assert delta(before, after, "tether_lease_takeovers_total") == 1


def test_worker_and_console_export_the_fleet_signals(metered: Metered) -> None:
    """The autoscaling signals (tether.runs.fleet) on both /metrics pages: the metered worker's
    two pool slots, read from its presence record."""

    def slots(samples: Samples) -> Samples | None:
        return samples if value(samples, "tether_worker_slots") == 2 else None

    worker = eventually(lambda: slots(metered.scrape()), timeout_s=30)
    assert value(worker, "tether_broker_queue_depth", queue=QUEUE) == 0
    assert ("tether_oldest_queued_run_age_seconds", frozenset({("queue", QUEUE)})) in worker
    assert ("tether_worker_slots_busy", frozenset()) in worker
    assert ("tether_runs_in_flight", frozenset()) in worker
    console = eventually(lambda: slots(scrape(metered.console.url + "/metrics")), timeout_s=30)
    assert value(console, "tether_broker_queue_depth", queue=QUEUE) == 0
