"""The broker need not persist (docs/durability.md): the run record in the state Redis is the
source of truth, the broker's message a wake-up. Runs are submitted while no worker consumes,
then the broker (a second redis-server without persistence) is killed and started empty: every
message is gone. A worker started afterwards finds the runs through the sweeper's queued
indexes (a session no worker claimed within 5 lease TTLs) and runs each once.

This test's producer and worker use a lease TTL of 1 s, not the stack's 2 s: the wait is five
TTLs whatever the TTL, and half of it is 5 s less of the test spent waiting.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.stack import Stack, eventually, unique
from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerFleet
from tether.producer.client import Producer

QUEUE = "lostq"
RUNS = 3
#: The lease TTL of this test's producer and worker: the backlog patience is five of them.
LEASE_TTL_MS = 1000


def test_a_broker_that_lost_its_messages_costs_a_wait_not_a_run(
    live_stack: Stack, tmp_path: Path
) -> None:
    broker = RedisServer(unix_socket=False).start()
    namespace = unique("lost")  # the shared stack's sweepers never see these sessions
    settings = live_stack.settings.model_copy(
        update={
            "broker_url": broker.url,
            "queue": QUEUE,
            "namespace": namespace,
            "lease_ttl_ms": LEASE_TTL_MS,
        }
    )
    producer = Producer(settings)
    fleet: WorkerFleet | None = None
    try:
        sessions = [unique("lost") for _ in range(RUNS)]
        handles = [producer.run_async(sid, f"hello {sid}", agent="echo") for sid in sessions]
        client = broker.client()
        waiting = eventually(lambda: [k for k in client.scan_iter() if client.type(k) == b"list"])
        assert sum(int(client.llen(k)) for k in waiting) == RUNS  # they wait in the broker
        broker.kill()
        broker.start()  # no persistence: every message is gone
        assert broker.client().dbsize() == 0
        env = dict(
            live_stack.env,
            TETHER_BROKER_URL=broker.url,
            TETHER_QUEUE=QUEUE,
            TETHER_NAMESPACE=namespace,
            TETHER_LEASE_TTL_MS=str(LEASE_TTL_MS),
        )
        fleet = WorkerFleet(env, tmp_path, count=1, queue=QUEUE, prefix="lost").start()
        for sid, handle in zip(sessions, handles, strict=True):
            result = handle.result(timeout=180)
            assert result.status == "COMPLETED" and result.output == f"echo: hello {sid}"
            assert result.attempts == 1
    finally:
        if fleet is not None:
            fleet.stop()
        producer.close()
        broker.close()
