"""A real worker names the runs it executes: in its presence record, in the fleet signals
(``tether_runs_in_flight``) and in ``tether status --json``.

The heartbeat read the run id out of the message body as a dict, but a run message carries the
request as JSON text (a wake-up of its ids with TETHER_REGISTERED_RUNS_ONLY), so every worker
said it ran nothing while its slots were busy. One worker of 3 slots, in registered-runs-only
mode, executes a run of each message kind at once: a whole request, a wake-up, and a canvas
task (``tether.canvas.run``, run ``run-<task id>``). Private redis-server, local-directory store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.stack import eventually, unique
from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerProcess
from tether.keys import RedisKeys
from tether.producer import Producer
from tether.runs.fleet import fleet_collector, read_fleet_signals
from tether.runs.presence import WorkerPresence, list_workers
from tether.settings import Settings

QUEUE = "presence"
SLEEP = "sleep 60"  # longer than the test: the worker is killed at the end, mid-run

CANVAS = """
import sys
from tether.worker.canvas import tether_run
tether_run.apply_async(args=(sys.argv[1], sys.argv[2]), kwargs={"agent": "sleepy"},
                       task_id=sys.argv[3])
"""


def _in_flight_metric(settings: Settings, client: redis.Redis) -> float:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(fleet_collector(settings, client))
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name == "tether_runs_in_flight":
                return sample.value
    raise AssertionError("no tether_runs_in_flight sample")


def test_a_busy_worker_names_the_runs_it_executes(tmp_path: Path) -> None:
    with RedisServer(unix_socket=False) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "AWS_"))}
        env.update(
            TETHER_BROKER_URL=server.url,
            TETHER_STORE_URL=f"file://{tmp_path / 'store'}",
            TETHER_QUEUE=QUEUE,
            TETHER_REGISTERED_RUNS_ONLY="1",
        )
        settings = Settings(broker_url=server.url, store_url=env["TETHER_STORE_URL"], queue=QUEUE)
        worker = WorkerProcess("busy", env, tmp_path / "logs", concurrency=3, queue=QUEUE)
        try:
            worker.start(timeout_s=90)
            canvas_task = unique("canvas")
            subprocess.run(  # the canvas signature is applied by a user's own process
                [sys.executable, "-c", CANVAS, unique("cv"), SLEEP, canvas_task],
                env=env, check=True, timeout=60, capture_output=True,
            )  # fmt: skip
            with Producer(settings) as whole:  # the message carries the whole request
                run_whole = whole.run_async(unique("w"), SLEEP, agent="sleepy").run_id
            woken = settings.model_copy(update={"registered_runs_only": True})
            with Producer(woken) as wake:  # the message carries the run's ids only
                run_woken = wake.run_async(unique("k"), SLEEP, agent="sleepy").run_id
            expected = tuple(sorted((run_whole, run_woken, f"run-{canvas_task}")))

            with Producer(settings) as reader:
                keys = RedisKeys(settings.namespace)

                def busy() -> list[WorkerPresence] | None:
                    records = list_workers(reader.redis, keys)
                    return records if [r.busy for r in records] == [3] else None

                (record,) = eventually(busy, timeout_s=30)  # all three runs executing
                assert (record.pid, record.current_runs) == (worker.pid, expected)
                signals = read_fleet_signals(
                    reader.redis, keys, [QUEUE], broker=reader.redis, broker_namespace="tether"
                )
                assert (signals.in_flight, signals.busy_slots, signals.slots) == (3, 3, 3)
                assert _in_flight_metric(settings, reader.redis) == 3

            status = subprocess.run(
                [sys.executable, "-m", "tether.producer.ops.cli", "status", "--json"],
                env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            shown_status = json.loads(status.stdout)
            assert shown_status["running"] == list(expected), status.stderr
            assert shown_status["fleet"]["runs_in_flight"] == 3
        finally:
            worker.kill()  # mid-run: nothing to wait for
