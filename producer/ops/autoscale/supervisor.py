"""``tether autoscale``: a local supervisor that starts and stops Celery worker processes on the
fleet signals, following :mod:`tether.producer.ops.autoscale.policy`.

Every ``interval_s`` it reads the signals of its queue
(:func:`tether.runs.fleet.read_fleet_signals`), asks
:func:`~tether.producer.ops.autoscale.policy.decide` for a count and acts on the difference:

- **out**: start worker processes (:class:`tether.dev.workers.WorkerProcess`) without waiting for
  them; a starting worker counts at once, so the next tick does not start it twice;
- **in**: a warm shutdown, SIGTERM to the worker's main process (as ``docker stop`` and a
  Kubernetes pod deletion send it): the worker takes no new message and hands a running run back
  at its last checkpoint, so another worker resumes it without redoing a finished step. Idle
  workers are stopped first (the presence records tell which are busy), the newest first. A
  worker still there ``stop_timeout_s`` later is killed (its run is then recovered by the
  sweeper, as after a crash).

Stopping the supervisor (SIGINT, SIGTERM: ``tether down``) stops its workers the same warm way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tether.dev.workers import WorkerProcess
from tether.errors import ConfigurationError, TetherError
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.producer.ops.autoscale.policy import Decision, Load, PolicyState, ScalePolicy, decide
from tether.runs.fleet import FleetSignals, broker_client, read_fleet_signals
from tether.runs.presence import list_workers
from tether.settings import Settings

log = logging.getLogger(__name__)

#: How long a warm-stopped worker may take to hand its run back and exit before it is killed.
STOP_TIMEOUT_S = 60.0


@dataclass
class FleetProbe:
    """Reads the signals of one queue from the settings' Redis (state) and Redis broker.

    Raises:
        ConfigurationError: the broker is no Redis (its queue cannot be read here).
    """

    settings: Settings
    queue: str

    def __post_init__(self) -> None:
        s = self.settings
        self.keys = RedisKeys(s.namespace)
        self.state = redis_from_url(s.effective_redis_url, retry=None, socket_timeout=5.0)
        self.broker = broker_client(s, self.state)
        if self.broker is None:
            self.state.close()
            scheme = s.effective_broker_url.split("://", 1)[0]
            raise ConfigurationError(
                f"tether autoscale reads the queue from a Redis broker, and TETHER_BROKER_URL is "
                f"{scheme}://; use a Redis broker, or scale on the broker's own queue length "
                "(e.g. KEDA's rabbitmq trigger, see docs/autoscaling.md)"
            )

    def read(self) -> FleetSignals:
        """One reading (raises StreamUnavailable when a Redis is away)."""
        return read_fleet_signals(
            self.state,
            self.keys,
            [self.queue],
            broker=self.broker,
            broker_namespace=self.settings.namespace,
        )

    def busy_pids(self) -> dict[int, int]:
        """Busy slots of each live worker, by main process id."""
        return {w.pid: w.busy for w in list_workers(self.state, self.keys)}

    def close(self) -> None:
        """Close the clients."""
        self.state.close()
        if self.broker is not None and self.broker is not self.state:
            self.broker.close()


@dataclass
class _Stopping:
    worker: WorkerProcess
    deadline_s: float


class Supervisor:
    """Starts and stops worker processes of ``queue`` on the fleet signals.

    Args:
        probe: reads the signals.
        policy: the scaling rules (its ``slots_per_worker`` is each worker's pool size).
        env: the workers' environment.
        log_dir: where the workers' logs go (``as1.log``, ``as2.log``...).
        say: called with one line per change (the CLI prints it).
    """

    def __init__(
        self,
        probe: FleetProbe,
        policy: ScalePolicy,
        *,
        env: Mapping[str, str],
        log_dir: Path,
        say: Callable[[str], None] = log.info,
        stop_timeout_s: float = STOP_TIMEOUT_S,
    ) -> None:
        self.probe = probe
        self.policy = policy
        self.env = dict(env)
        self.log_dir = log_dir
        self.say = say
        self.stop_timeout_s = stop_timeout_s
        self.workers: list[WorkerProcess] = []
        self.stopping: list[_Stopping] = []
        self.state = PolicyState()
        self._started = 0

    @property
    def count(self) -> int:
        """Workers running or starting (not those stopping)."""
        return len(self.workers)

    def tick(self, now_s: float | None = None) -> Decision:
        """Read the signals once and act on the policy's answer."""
        now_s = time.monotonic() if now_s is None else now_s
        self._reap(now_s)
        for dead in [w for w in self.workers if not w.alive()]:  # replaced below
            code = dead.proc.returncode if dead.proc is not None else None
            # a worker that cannot start (a bad agent module) was restarted every few seconds,
            # silently: say why, where its log is
            self.say(f"worker {dead.name} exited with code {code}; its log: {dead.log_path}")
            dead.stop(timeout_s=0)  # its pool children, if any outlived it
            self.workers.remove(dead)
        signals = self.probe.read()
        load = Load(
            queued=signals.queued.get(self.probe.queue, 0),
            busy_slots=signals.busy_slots,
            oldest_age_s=signals.oldest_age_s.get(self.probe.queue),
        )
        decision = decide(self.policy, load, self.count, self.state, now_s)
        self.state = decision.state
        if decision.desired != self.count:
            self.say(f"{decision.reason}: workers {self.count} -> {decision.desired}")
        while self.count < decision.desired:
            self._start_one()
        if self.count > decision.desired:
            self._stop(self.count - decision.desired, now_s)
        return decision

    def run(self, stop: threading.Event, interval_s: float = 1.0) -> None:
        """Tick every ``interval_s`` until ``stop`` is set, then stop every worker."""
        try:
            while not stop.is_set():
                try:
                    self.tick()
                except TetherError as exc:  # Redis away for a moment: keep the fleet as it is
                    log.warning("autoscale: signals not read: %s", exc)
                stop.wait(interval_s)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Warm-stop every worker and wait for them (killing those past the timeout)."""
        self._stop(self.count, time.monotonic())
        while self.stopping:
            self._reap(time.monotonic())
            time.sleep(0.1)

    def _start_one(self) -> None:
        self._started += 1
        worker = WorkerProcess(
            f"as{self._started}-{os.getpid()}",
            self.env,
            self.log_dir,
            concurrency=self.policy.slots_per_worker,
            queue=self.probe.queue,
            die_with_parent=True,  # a supervisor killed outright takes its workers with it
        )
        worker.start(wait=False)
        self.workers.append(worker)

    def _stop(self, how_many: int, now_s: float) -> None:
        try:
            busy = self.probe.busy_pids()
        except TetherError:
            busy = {}
        # idle first, then the newest: the oldest workers keep their warm caches
        order = sorted(reversed(self.workers), key=lambda w: busy.get(w.pid or -1, 0) > 0)
        for worker in order[:how_many]:
            self.workers.remove(worker)
            if worker.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.proc.pid, signal.SIGTERM)  # the main process: warm shutdown
            self.stopping.append(_Stopping(worker, now_s + self.stop_timeout_s))

    def _reap(self, now_s: float) -> None:
        left = []
        for item in self.stopping:
            if item.worker.alive() and now_s < item.deadline_s:
                left.append(item)
            else:
                item.worker.stop(timeout_s=0)  # clears the group: leftovers, or past the deadline
        self.stopping = left
