"""#47: the trust rule is on by default, and turning it off is loud. On real worker processes
(a private redis-server and moto): a worker with ``TETHER_REGISTERED_RUNS_ONLY=false`` logs a
WARNING naming the risk at every start (it registers and runs whatever a message names); a
worker on the default settings logs none, and refuses a message for a run nobody registered.

The trusting worker consumes a queue of its own, so it never takes the messages sent to the
default one: the default worker's checks run while the trusting one starts again (each start of
a prefork worker is 2-3 s, each stop ~1.5 s, mostly Celery's and billiard's own waits)."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.support.moto_server import S3TestBucket
from tests.support.stack import eventually, stack_env
from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerProcess
from tether.producer import Producer
from tether.settings import Settings
from tether.worker.tasks import TRUSTING_WARNING

NS = "trust"
#: The trusting worker's queue: nothing is sent to it, so it runs none of the test's messages.
TRUSTING_Q = "trust-t"


def test_a_worker_that_trusts_messages_warns_at_every_start(
    tmp_path: Path, s3_bucket: S3TestBucket
) -> None:
    server = RedisServer(unix_socket=False).start()
    env = stack_env(server.url, s3_bucket.endpoint_url, s3_bucket.bucket)
    env.update(TETHER_NAMESPACE=NS, TETHER_QUEUE=NS)
    trusting_env = {**env, "TETHER_REGISTERED_RUNS_ONLY": "false", "TETHER_QUEUE": TRUSTING_Q}
    trusting = WorkerProcess("trusting", trusting_env, tmp_path, queue=TRUSTING_Q)
    default = WorkerProcess("default", env, tmp_path, queue=NS)
    try:
        for worker in (trusting, default):
            worker.start(wait=False)
        for worker in (trusting, default):
            worker.wait_ready()
        eventually(lambda: TRUSTING_WARNING[:60] in trusting.log_text(), timeout_s=30)
        assert "WARNING" in next(
            line for line in trusting.log_text().splitlines() if TRUSTING_WARNING[:60] in line
        )
        trusting.stop()
        trusting.start(wait=False)  # every start, not once per deployment
        # meanwhile, the default worker: no warning, and a message nobody registered is refused
        producer = Producer(
            Settings(
                broker_url=server.url,
                redis_url=server.url,
                namespace=NS,
                queue=NS,
                store_url=f"s3://{s3_bucket.bucket}/tether",
                s3_endpoint_url=s3_bucket.endpoint_url,
            )
        )
        try:
            made = {"run_id": "run-h1", "request_id": "run-h1", "session_id": "s-1"}
            message = {**made, "agent": "echo", "input": "by hand"}
            producer.celery.send_task("tether.run", kwargs={"request": message}, queue=NS)
            eventually(lambda: "refused run message run-h1" in default.log_text(), 30)
            assert producer.record("run-h1") is None
            producer.register_message(message)
            producer.celery.send_task("tether.run", kwargs={"request": message}, queue=NS)
            assert producer.handle("run-h1").result(timeout=60).output == "echo: by hand"
        finally:
            producer.close()
        assert TRUSTING_WARNING[:60] not in default.log_text()
        trusting.wait_ready()
        eventually(lambda: TRUSTING_WARNING[:60] in trusting.log_text(), timeout_s=30)  # anew
        assert trusting.log_path.read_text().count(TRUSTING_WARNING[:60]) == 2
    finally:
        for worker in (trusting, default):
            worker.signal(signal.SIGTERM)  # both wind down at once
        trusting.stop()
        default.stop()
        server.close()
