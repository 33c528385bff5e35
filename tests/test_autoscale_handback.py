"""Scale-in while every worker is busy: the supervisor's warm shutdown hands the running run back
at its last checkpoint, another worker resumes it, and no completed step is redone.

The supervisor runs in the test process, ticked by hand (no timing), over real Celery worker
processes, a private redis-server and a local-directory store. The runs are the durable tests'
10-step counter (``counter-slow``: 0.3 s per step, tool effects deduplicated and counted in
Redis by idempotency key, model calls counted).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.support.durable_agents import STEPS, RedisCounter, counter_env
from tests.support.stack import eventually, unique
from tether.core.results import RunStatus
from tether.dev.redis_server import RedisServer
from tether.producer import Producer
from tether.producer.ops.autoscale.policy import ScalePolicy
from tether.producer.ops.autoscale.supervisor import FleetProbe, Supervisor
from tether.settings import Settings

QUEUE = "handback"


def test_scale_in_of_a_busy_worker_hands_its_run_back(tmp_path: Path) -> None:
    with RedisServer(unix_socket=False) as server:
        store_url = f"file://{tmp_path / 'store'}"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "AWS_"))}
        base.update(TETHER_BROKER_URL=server.url, TETHER_STORE_URL=store_url)
        prefix = unique("counter")
        env = counter_env(base, server.url, prefix, QUEUE)
        counter = RedisCounter(server.url, prefix)
        settings = Settings(broker_url=server.url, store_url=store_url, queue=QUEUE)
        probe = FleetProbe(settings, QUEUE)
        supervisor = Supervisor(probe, ScalePolicy(min_workers=2, max_workers=2), env=env,
                                log_dir=tmp_path / "logs", stop_timeout_s=90)  # fmt: skip
        try:
            decision = supervisor.tick()
            assert decision.desired == 2 and supervisor.count == 2
            for worker in supervisor.workers:
                worker.wait_ready(90)
            with Producer(settings) as producer:
                handles = [
                    producer.run_async(unique("hb"), "count to ten", agent="counter-slow")
                    for _ in range(2)
                ]
                # both workers busy (their heartbeats say so), each run a few steps in
                eventually(lambda: sum(probe.busy_pids().values()) == 2, timeout_s=60)
                eventually(lambda: counter.read("total") >= 4, timeout_s=60)

                supervisor.policy = ScalePolicy(min_workers=1, max_workers=1)
                decision = supervisor.tick()
                assert decision.desired == 1 and len(supervisor.stopping) == 1
                stopped = supervisor.stopping[0].worker
                results = [h.result(timeout=120) for h in handles]
            eventually(lambda: not stopped.alive(), timeout_s=90)
            supervisor.tick()
            assert supervisor.stopping == [] and supervisor.count == 1
        finally:
            supervisor.shutdown()
            probe.close()
        assert "handed back at its last checkpoint" in stopped.log_text()
        assert all(r.status is RunStatus.COMPLETED for r in results)
        assert all(r.output == f"counted {STEPS}" for r in results)
        assert all(r.attempts == 1 for r in results)  # a hand-back is no failed attempt
        assert counter.read("total") == 2 * STEPS
        assert counter.read("model_calls") == 2 * (STEPS + 1)  # resumed, no step asked again
        assert counter.read("invocation_count") == 2 * STEPS  # no tool ran twice


@pytest.mark.slow  # two worker boots for a rule of a few lines
def test_a_worker_that_dies_is_replaced_at_the_next_reading(tmp_path: Path) -> None:
    with RedisServer(unix_socket=False) as server:
        store_url = f"file://{tmp_path / 'store'}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "AWS_"))}
        env.update(TETHER_BROKER_URL=server.url, TETHER_STORE_URL=store_url, TETHER_QUEUE=QUEUE)
        settings = Settings(broker_url=server.url, store_url=store_url, queue=QUEUE)
        probe = FleetProbe(settings, QUEUE)
        lines: list[str] = []
        supervisor = Supervisor(probe, ScalePolicy(min_workers=1, max_workers=1), env=env,
                                log_dir=tmp_path / "logs", say=lines.append)  # fmt: skip
        try:
            supervisor.tick()
            (first,) = supervisor.workers
            first.wait_ready(90)
            first.kill()  # SIGKILL to its process group: a crash
            supervisor.tick()
            (second,) = supervisor.workers
            assert second is not first and second.alive()
            second.wait_ready(90)
            assert lines[0] == lines[2] == "bounds [1, 1]: workers 0 -> 1"
            # why it went, and where to look: a worker that cannot start was replaced silently
            assert lines[1].startswith(f"worker {first.name} exited with code -9; its log: ")
            assert len(lines) == 3
        finally:
            supervisor.shutdown()
            probe.close()
        assert not second.alive()  # shutdown stopped it


def test_a_supervisor_killed_outright_takes_its_workers_with_it(tmp_path: Path) -> None:
    """A supervisor SIGKILLed (or killed by the OOM killer) left its workers running and
    consuming, detached in sessions of their own, and ``tether down`` then stopped none of
    them. A worker a supervisor starts gets SIGTERM (a warm shutdown) when its parent dies."""
    with RedisServer(unix_socket=False) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "AWS_"))}
        env.update(TETHER_BROKER_URL=server.url, TETHER_QUEUE=QUEUE)
        env["TETHER_STORE_URL"] = f"file://{tmp_path / 'store'}"
        parent_code = (
            "import json, sys, time\n"
            "from tether.dev.workers import WorkerProcess\n"
            "env, logs = json.loads(sys.argv[1]), sys.argv[2]\n"
            "w = WorkerProcess('child', env, logs, queue=sys.argv[3], die_with_parent=True)\n"
            "w.start(wait=True, timeout_s=90)\n"
            "print(w.pid, flush=True)\n"
            "time.sleep(600)\n"
        )
        parent = subprocess.Popen(
            [sys.executable, "-c", parent_code, json.dumps(env), str(tmp_path / "logs"), QUEUE],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert parent.stdout is not None
        worker_pid = int(parent.stdout.readline())
        try:
            assert psutil.pid_exists(worker_pid)
            parent.kill()  # SIGKILL: no cleanup of its own
            parent.wait(timeout=30)
            gone = eventually(lambda: not _running(worker_pid) or None, timeout_s=60)
            assert gone
        finally:
            if _running(worker_pid):
                os.killpg(worker_pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
