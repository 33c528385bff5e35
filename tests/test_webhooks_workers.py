"""Webhooks on a real worker, to a local receiver: a run's webhook fails (500), times out, then
is accepted, each attempt signed; a tenant's webhook of a run waiting for a person runs out of
attempts into the dead letters, and ``tether webhooks redeliver`` delivers it, its URL's
password and token (planted afresh for each run of the tests) in no log line, dead letter or
Redis value."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.redis_scan import flatten_redis
from tests.support.stack import eventually, unique
from tests.support.webhook_receiver import ACCEPT, FAIL, HANG, Receiver, webhook_receiver
from tether.core.results import RunStatus
from tether.dev.workers import WorkerFleet
from tether.errors import UsageError
from tether.producer.client import Producer
from tether.producer.ops.webhooks_admin import dead_letters, redeliver
from tether.runs.webhooks import ID_HEADER, verify_webhook
from tether.settings import load_settings
from tether.settings.checks import mask_url

SECRET = "whsec-test-secret"
MAX_ATTEMPTS = 3


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with webhook_receiver(hang_s=3.0) as started:
        yield started


@pytest.fixture(scope="module")
def hooks_fleet(
    redis_server: Any, receiver: Receiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerFleet]:
    """One worker (two pool processes: a hanging receiver does not hold up runs)."""
    log_dir = tmp_path_factory.mktemp("webhooks")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.update(
        {
            "TETHER_BROKER_URL": redis_server.url,
            "TETHER_REDIS_URL": redis_server.url,
            "TETHER_STORE_URL": f"file://{log_dir / 'store'}",
            "TETHER_QUEUE": "webhooks",
            "TETHER_WEBHOOK_SECRETS": json.dumps({"*": SECRET}),
            # a receiver that wants a password and a token: the settings hold them, storage and
            # logs never do
            "TETHER_WEBHOOK_URLS": json.dumps({"hooks": _with_password(receiver.url, "/tenant")}),
            "TETHER_WEBHOOK_ALLOW_PRIVATE": "true",
            "TETHER_WEBHOOK_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
            "TETHER_WEBHOOK_BACKOFF_S": "0.2",
            "TETHER_WEBHOOK_TIMEOUT_S": "1",
        }
    )
    fleet = WorkerFleet(env, log_dir, count=1, concurrency=2, queue="webhooks")
    with fleet:
        yield fleet


@pytest.fixture(scope="module")
def hooks_env(hooks_fleet: WorkerFleet) -> dict[str, str]:
    return hooks_fleet.workers[0].env


HOOK_PASSWORD = f"pw-{uuid.uuid4().hex}"
HOOK_TOKEN = f"tok-{uuid.uuid4().hex}"


def _with_password(url: str, path: str) -> str:
    return url.replace("http://", f"http://hooks:{HOOK_PASSWORD}@") + f"{path}?token={HOOK_TOKEN}"


def _settings(env: dict[str, str]) -> Any:
    names = {k[len("TETHER_") :].lower(): v for k, v in env.items() if k.startswith("TETHER_")}
    return load_settings(**names)


def _tether(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "tether"
    return subprocess.run(
        [str(script), *args], env=env, capture_output=True, text=True, timeout=90, check=False
    )


def test_a_run_webhook_fails_times_out_then_is_accepted_signed(
    hooks_env: dict[str, str], receiver: Receiver
) -> None:
    receiver.scripts["/run"] = [FAIL, HANG, ACCEPT]
    with Producer(_settings(hooks_env)) as producer:
        sid = unique("hook")
        result = producer.run(sid, "hello", agent="echo", webhook=f"{receiver.url}/run", wait_s=60)
    assert result.status is RunStatus.COMPLETED
    got = eventually(lambda: receiver.on("/run") if len(receiver.on("/run")) >= 3 else None, 60)
    assert [r.action for r in got] == [FAIL, HANG, ACCEPT]
    bodies = [verify_webhook(r.body, r.headers, SECRET) for r in got]  # each attempt signed
    assert len({r.headers[ID_HEADER] for r in got}) == 1  # one delivery, three attempts
    assert all(body == bodies[0] for body in bodies)  # the same bytes every attempt
    body = bodies[0]
    assert (body["run_id"], body["session_id"], body["tenant"]) == (result.run_id, sid, "default")
    assert body["status"] == "COMPLETED" and body["output_summary"] == result.output
    assert body["usage"] == result.usage.model_dump(mode="json")


def test_a_dead_webhook_is_listed_and_redelivered(
    hooks_fleet: WorkerFleet, hooks_env: dict[str, str], receiver: Receiver
) -> None:
    receiver.default["/tenant"] = FAIL
    settings = _settings({**hooks_env, "TETHER_TENANT": "hooks"})
    with Producer(settings) as producer:
        waiting = producer.run(unique("wait"), "transfer 5", agent="approver", wait_s=60)
    assert waiting.status is RunStatus.WAITING  # the tenant's webhook: a person is needed
    delivery_id = f"wh-{waiting.run_id}-waiting"

    with Producer(settings) as producer:  # wait in-process: a CLI start per poll is slow
        eventually(lambda: dead_letters(producer).get(delivery_id), 60)
        listed = _tether(hooks_env, "webhooks", "dead", "--tenant", "hooks", "--json")
        assert listed.returncode == 0, listed.stderr
        letter = next(d for d in json.loads(listed.stdout) if d["id"] == delivery_id)
        assert letter["attempts"] == MAX_ATTEMPTS and letter["last_error"] == "HTTP 500", letter[
            "last_error"
        ]
        # the URL's password and token are in no dead letter, listing or Redis value (the
        # password was in all three)
        assert letter["url"] == mask_url(_with_password(receiver.url, "/tenant"))
        assert "token=***" in letter["url"]
        for planted in (HOOK_PASSWORD, HOOK_TOKEN):
            assert planted not in listed.stdout
            stored = flatten_redis(producer.redis).items()
            assert not [k for k, v in stored if planted.encode() in v]
        assert len(receiver.on("/tenant")) == MAX_ATTEMPTS
        receiver.default["/tenant"] = ACCEPT
        again = _tether(hooks_env, "webhooks", "redeliver", delivery_id)
        assert again.returncode == 0, again.stderr
        accepted = eventually(lambda: [r for r in receiver.on("/tenant") if r.action == ACCEPT], 60)
        assert dead_letters(producer).get(delivery_id) is None
        with pytest.raises(UsageError, match=delivery_id):  # redelivered: no longer dead
            redeliver(producer, delivery_id)
    body = verify_webhook(accepted[0].body, accepted[0].headers, SECRET)
    assert body["status"] == "WAITING" and body["pending"][0]["tool"] == "transfer"
    # every attempt, the redelivered one too, went with the password from the settings
    expected = "Basic " + base64.b64encode(f"hooks:{HOOK_PASSWORD}".encode()).decode()
    assert {r.headers.get("Authorization") for r in receiver.on("/tenant")} == {expected}
    assert {r.query for r in receiver.on("/tenant")} == {f"token={HOOK_TOKEN}"}
    assert accepted[0].headers[ID_HEADER] == delivery_id
    # W3: httpx's INFO line put the URL's token in the worker's log at every attempt
    worker_log = hooks_fleet.workers[0].log_path.read_bytes()
    assert f"webhook {delivery_id} delivered".encode() in worker_log
    assert HOOK_PASSWORD.encode() not in worker_log and HOOK_TOKEN.encode() not in worker_log


def test_a_second_task_for_a_delivery_spends_none_of_its_attempts(
    hooks_env: dict[str, str], receiver: Receiver
) -> None:
    """Run ids travel in the broker's queues, so any tenant can publish a ``tether.webhook``
    task naming another tenant's delivery (``wh-<run id>-<status>``), and a task may be
    delivered twice. Two tasks for one attempt read the same count and both sent it, each then
    queueing its own retries: five such tasks made 9 requests of a delivery allowed 6. Each
    attempt is now taken by one task; the other is refused, and the receiver gets at most
    TETHER_WEBHOOK_MAX_ATTEMPTS requests."""
    receiver.scripts["/dup"] = [HANG]  # the first attempt is in flight (1 s) when the copy comes
    receiver.default["/dup"] = FAIL
    with Producer(_settings(hooks_env)) as producer:
        sid = unique("dup")
        done = producer.run(sid, "hello", agent="echo", webhook=f"{receiver.url}/dup", wait_s=60)
        delivery_id = f"wh-{done.run_id}-completed"
        eventually(lambda: receiver.on("/dup"), 30)
        for _ in range(3):  # two slots: one copy meets the attempt in flight, the others later
            producer.celery.send_task(
                "tether.webhook", kwargs={"delivery_id": delivery_id}, queue="webhooks"
            )
        letter = eventually(lambda: dead_letters(producer).get(delivery_id), 60)
    assert letter.attempts == MAX_ATTEMPTS
    assert len(receiver.on("/dup")) == MAX_ATTEMPTS
