"""#47 W1 on a real worker that trusts its tenants (``TETHER_REGISTERED_RUNS_ONLY`` off).

Tenant ``team-b`` has its own Redis ACL user (docs/trust-model.md) with the broker access every
submitting tenant needs. It publishes a ``tether.webhook`` task carrying a whole delivery of its
choosing in team-a's name: its text, a receiver of its own. Such a task was honoured without the
setting: the worker signed team-b's body with team-a's secret, and ``verify_webhook`` with
team-a's secret accepted it (a signing oracle). A task now names a delivery a worker stored and
never carries one, in every mode: the task is refused and counted, and nothing is signed or sent.
(The same task under ``TETHER_REGISTERED_RUNS_ONLY``:
``tests/test_tenant_forgery_workers.py::test_a_webhook_task_forged_by_another_tenant_is_refused_and_sends_nothing``.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from celery import Celery

from tests.support.stack import eventually
from tests.support.webhook_receiver import Receiver, webhook_receiver
from tests.test_metrics import MeteredWorker, scrape, value
from tests.test_tenant_acl import tenant_acl
from tether.dev.redis_server import RedisServer, free_port
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.runs.webhooks import verify_webhook
from tether.runs.webhooks.delivery import WEBHOOK_TASK, Delivery
from tether.worker.webhooks import UNSTORED

NS = "hookforge"
QUEUE = "hookforge-q"
A_SECRET = "whsec-team-a-" + "a" * 20
B_SECRET = "whsec-team-b-" + "b" * 20


@dataclass
class Trusting:
    server: RedisServer
    admin: redis.Redis
    worker: MeteredWorker
    receiver: Receiver

    def tenant_url(self, tenant: str) -> str:
        """A tenant's own credential: its keys (the trust model's rules) and the broker's."""
        password = f"pw-{tenant}-secret"
        rules = [*tenant_acl(RedisKeys(NS), tenant), f"~{NS}-celery:*", "&*"]
        self.admin.execute_command("ACL", "SETUSER", tenant, "reset", f">{password}", *rules)
        return f"redis://{quote(tenant)}:{quote(password)}@127.0.0.1:{self.server.port}/0"

    def refused(self, reason: str) -> float:
        samples = scrape(f"http://127.0.0.1:{self.worker.metrics_port}/metrics")
        return value(samples, "tether_messages_refused_total", reason=reason)


@pytest.fixture(scope="module")
def trusting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trusting]:
    """One worker without TETHER_REGISTERED_RUNS_ONLY, both tenants' secrets, and a receiver
    on loopback (allowed: the receiver stands for a host team-b controls)."""
    tmp = tmp_path_factory.mktemp("hookforge")
    server = RedisServer(unix_socket=False, password="admin-" + "x" * 24).start()
    admin = redis_from_url(server.url)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "AWS_"))}
    env.update(
        TETHER_BROKER_URL=server.url,
        TETHER_REDIS_URL=server.url,
        TETHER_STORE_URL=f"file://{tmp / 'store'}",
        TETHER_NAMESPACE=NS,
        TETHER_QUEUE=QUEUE,
        TETHER_REGISTERED_RUNS_ONLY="false",
        TETHER_WEBHOOK_SECRETS=json.dumps({"team-a": A_SECRET, "team-b": B_SECRET}),
        TETHER_WEBHOOK_ALLOW_PRIVATE="true",
        TETHER_WEBHOOK_MAX_ATTEMPTS="1",
        TETHER_WEBHOOK_TIMEOUT_S="2",
        PYTHONUNBUFFERED="1",
    )
    worker = MeteredWorker(env, Path(tmp), free_port(), queue=QUEUE, pool=1)
    try:
        with webhook_receiver() as receiver:
            worker.start()
            yield Trusting(server, admin, worker, receiver)
    finally:
        worker.stop()
        admin.close()
        server.close()


def publish_as(world: Trusting, tenant: str, **kwargs: object) -> None:
    """Publish one ``tether.webhook`` task with ``tenant``'s own credential."""
    celery = Celery(tenant, broker=world.tenant_url(tenant))
    celery.conf.broker_transport_options = {"global_keyprefix": f"{NS}-celery:"}
    try:
        celery.send_task(WEBHOOK_TASK, kwargs=kwargs, queue=QUEUE)
    finally:
        celery.close()


def test_a_webhook_task_carrying_a_delivery_is_refused_by_a_trusting_worker(
    trusting: Trusting,
) -> None:
    forged = Delivery(
        id="wh-run-oracle-completed",
        url=f"{trusting.receiver.url}/team-b-collects",
        tenant="team-a",
        session_id="s-a",
        run_id="run-oracle",
        status="COMPLETED",
        body='{"type":"run.completed","tenant":"team-a","output_summary":"APPROVED: pay team-b"}',
    )
    before = trusting.refused(UNSTORED)
    publish_as(trusting, "team-b", delivery=forged.model_dump_json())

    # the worker either sends it (the oracle) or refuses it: wait for whichever comes first
    eventually(
        lambda: trusting.receiver.on("/team-b-collects") or trusting.refused(UNSTORED) > before,
        timeout_s=60,
    )
    got = trusting.receiver.on("/team-b-collects")
    if got:  # say what the oracle did before failing
        signed_by_a = verify_webhook(got[0].body, got[0].headers, A_SECRET)
        pytest.fail(f"team-b's body went out signed with team-a's secret: {signed_by_a}")
    assert trusting.refused(UNSTORED) == before + 1
    assert "refused webhook task" in trusting.worker.log_text()
    assert list(trusting.admin.scan_iter(match=f"{NS}:{{~webhooks}}*")) == []  # no dead letter
