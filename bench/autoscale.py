"""Autoscaling on real workers: a burst of runs at one worker, ``tether autoscale`` scales out to
MAX, the queue drains, it scales back to MIN after the idle period. Counts what was lost,
duplicated and redone. ``python -m bench.autoscale`` (:mod:`bench.autoscale_report`) repeats it,
measures fixed-fleet baselines and writes ``bench/results/autoscale.json`` and ``autoscale.md``.

    python -m bench.autoscale                          # 400 runs, 1:4 workers, 15 s idle, 3x
    python -m bench.autoscale --runs 60 --max 3 --idle-s 3 --repeat 1 --no-baseline

The stack: a private redis-server (broker and state), a local-directory store, and ``tether
autoscale --min MIN --max MAX`` as a subprocess that starts and stops the worker processes. The
runs (one session each) are :mod:`bench.autoscale_agents`' 3-step agent, whose tool effects are
counted per ``(run, step)`` in Redis. Figures:

- ``to_max_s``: from the submit to MAX workers live (their presence records: started *and*
  consuming), target 10 s;
- ``back_to_min_s``: from the last result to MIN workers live again, target 30 s (the idle
  period is part of it);
- ``lost`` (runs not completed), ``duplicated`` (runs whose session holds more than one final
  answer), ``redone_steps`` (a step's tool run more than once) and ``extra_model_calls``.

``tests/test_autoscale_workers.py`` runs the scenario small and asserts the behaviour; the
timing targets are checked here only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.autoscale_agents import STEPS, effects_key, model_calls_key
from bench.stack import REPO_ROOT
from tether.core.events import EventType
from tether.core.results import RunStatus
from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerFleet
from tether.keys import RedisKeys
from tether.persistence.reader import SessionLogReader
from tether.persistence.storage_url import open_storage
from tether.producer import Producer
from tether.producer.submission import RunSpec
from tether.runs.presence import workers_for_queue
from tether.settings import Settings

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
QUEUE = "autoscale"
TARGET_TO_MAX_S = 10.0
TARGET_BACK_TO_MIN_S = 30.0


@dataclass
class Figures:
    """What one scenario showed."""

    runs: int
    min_workers: int
    max_workers: int
    idle_s: float
    to_max_s: float | None = None
    drain_s: float | None = None
    back_to_min_s: float | None = None
    peak_workers: int = 0
    completed: int = 0
    lost: int = 0
    duplicated: int = 0
    redone_steps: int = 0
    missing_steps: int = 0
    extra_model_calls: int = 0
    supervisor: list[str] = field(default_factory=list)


class WorkerCount:
    """Samples the live workers of the queue (presence records) every 50 ms in a thread."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self.samples: list[tuple[float, int]] = []
        self._client, self._keys = client, keys
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            count = len(workers_for_queue(self._client, self._keys, QUEUE))
            self.samples.append((time.monotonic(), count))

    def now(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def first(self, after_s: float, count: int) -> float | None:
        """The first sample time at or after ``after_s`` showing ``count`` workers."""
        return next((t for t, n in self.samples if t >= after_s and n == count), None)

    def wait_for(self, count: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.now() == count:
                return True
            time.sleep(0.05)
        return False

    def __enter__(self) -> WorkerCount:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@contextlib.contextmanager
def _supervisor(env: dict[str, str], workdir: Path, args: list[str]) -> Iterator[Path]:
    log = workdir / "autoscale.out"
    argv = [sys.executable, "-m", "tether.producer.ops.cli", "autoscale", *args]
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, env=env, cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        yield log
    finally:
        proc.send_signal(signal.SIGTERM)  # it stops its workers (warm) and exits
        try:
            proc.wait(timeout=120)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def _environment(server_url: str, namespace: str, store_url: str) -> dict[str, str]:
    """The workers' (and the supervisor's) environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "BENCH_"))}
    path = env.get("PYTHONPATH")
    env.update(
        TETHER_BROKER_URL=server_url,
        TETHER_STORE_URL=store_url,
        TETHER_NAMESPACE=namespace,
        TETHER_QUEUE=QUEUE,
        TETHER_AGENT_MODULES=json.dumps(["bench.autoscale_agents"]),
        BENCH_EFFECTS_URL=server_url,
        BENCH_EFFECTS_PREFIX=namespace,
        PYTHONPATH=str(REPO_ROOT) + (os.pathsep + path if path else ""),
        PYTHONUNBUFFERED="1",
    )
    return env


@contextlib.contextmanager
def _stack(workdir: Path) -> Iterator[tuple[dict[str, str], Settings, redis.Redis]]:
    """A private redis-server and a local-directory store: the environment, the producer's
    settings, a client."""
    workdir.mkdir(parents=True, exist_ok=True)
    store_url = f"file://{workdir / 'store'}"
    namespace = f"as{uuid.uuid4().hex[:8]}"
    with RedisServer(unix_socket=False) as server:
        settings = Settings(
            broker_url=server.url, store_url=store_url, namespace=namespace, queue=QUEUE
        )
        client = redis.Redis.from_url(server.url)
        try:
            yield _environment(server.url, namespace, store_url), settings, client
        finally:
            client.close()


def run_scenario(
    workdir: Path, *, runs: int, min_workers: int = 1, max_workers: int = 4, idle_s: float = 15.0
) -> Figures:
    """Run the scenario once (see the module docstring) and return its figures."""
    figures = Figures(runs, min_workers, max_workers, idle_s)
    with _stack(workdir) as (env, settings, client):
        args = ["--min", str(min_workers), "--max", str(max_workers), "--idle-s", str(idle_s),
                "--interval-s", "0.5", "--cooldown-s", "1",
                "--log-dir", str(workdir / "logs")]  # fmt: skip
        with (
            _supervisor(env, workdir, args) as log,
            WorkerCount(client, RedisKeys(settings.namespace)) as count,
            Producer(settings) as producer,
        ):
            if not count.wait_for(min_workers, 120):
                raise RuntimeError(f"the supervisor did not start {min_workers} worker(s): {log}")
            sessions = _burst(figures, producer, count, runs)
            figures.supervisor = log.read_text().splitlines()
        figures.peak_workers = max(n for _, n in count.samples)
        _count_effects(figures, client, settings.namespace, settings.store_url, sessions)
    return figures


def fixed_fleet_drain_s(workdir: Path, *, runs: int, workers: int) -> float:
    """The baseline: the same burst on ``workers`` fixed workers started beforehand; seconds
    from the submit to the last result."""
    with (
        _stack(workdir) as (env, settings, _client),
        WorkerFleet(env, workdir / "logs", count=workers, queue=QUEUE, prefix="fixed"),
        Producer(settings) as producer,
    ):
        specs = [RunSpec(f"fixed-{i}", f"run {i}", "stepper") for i in range(runs)]
        start = time.monotonic()
        for handle in producer.submit_many(specs):
            handle.result(timeout=max(300, runs))
        return round(time.monotonic() - start, 2)


def _burst(figures: Figures, producer: Producer, count: WorkerCount, runs: int) -> list[str]:
    """Submit the burst, wait for every result and for the fleet back at MIN; returns the
    sessions."""
    tag = uuid.uuid4().hex[:6]
    specs = [RunSpec(f"{tag}-{i}", f"run {i}", "stepper") for i in range(runs)]
    start = time.monotonic()
    handles = producer.submit_many(specs)
    results = []
    for handle in handles:
        with contextlib.suppress(TimeoutError):
            results.append(handle.result(timeout=max(300, runs)))
    drained = time.monotonic()
    figures.drain_s = round(drained - start, 2)
    figures.completed = sum(1 for r in results if r.status is RunStatus.COMPLETED)
    figures.lost = runs - figures.completed
    count.wait_for(figures.min_workers, figures.idle_s + 90)
    reached = count.first(start, figures.max_workers)
    back = count.first(drained, figures.min_workers)
    figures.to_max_s = None if reached is None else round(reached - start, 2)
    figures.back_to_min_s = None if back is None else round(back - drained, 2)
    return [spec.session_id for spec in specs]


def _count_effects(
    figures: Figures, client: redis.Redis, namespace: str, store_url: str, sessions: list[str]
) -> None:
    raw: dict[bytes, bytes] = client.hgetall(effects_key(namespace))  # type: ignore[assignment]
    effects = {k.decode(): int(v) for k, v in raw.items()}
    figures.redone_steps = sum(n - 1 for n in effects.values() if n > 1)
    figures.missing_steps = figures.completed * STEPS - len(effects)
    calls = int(client.get(model_calls_key(namespace)) or 0)
    figures.extra_model_calls = calls - figures.runs * (STEPS + 1)
    store, archive = open_storage(store_url)
    reader = SessionLogReader(store, archive)
    finals = [
        sum(1 for e in reader.events(sid) if e.type is EventType.FINAL_OUTPUT) for sid in sessions
    ]
    figures.duplicated = sum(1 for n in finals if n > 1)


if __name__ == "__main__":
    from bench.autoscale_report import main  # the command line and the results page

    raise SystemExit(main())
