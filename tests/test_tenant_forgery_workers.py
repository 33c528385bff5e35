"""#29 N1: a worker acts for a tenant only on that tenant's word, on real workers.

Each tenant has its own Redis ACL user (docs/trust-model.md) that also reaches the broker's
keys, as every tenant that submits must. Tenant ``team-b`` publishes ordinary run messages (a
run and an approval) whose bodies name ``team-a``'s session, and a canvas task for it. The
worker runs with ``TETHER_REGISTERED_RUNS_ONLY``: it refuses all three (no run of those ids was
registered in team-a's keyspace, which team-b's credential cannot write), counts them in
``tether_messages_refused``, and team-a's session is byte-identical in S3 and in Redis.

The worker runs with the default settings: ``TETHER_REGISTERED_RUNS_ONLY`` is on unless a
deployment turns it off (#47), and canvas chains work under it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from celery import Celery

from tests.support.moto_server import (
    FAKE_ACCESS_KEY_ID,
    FAKE_REGION,
    FAKE_SECRET_ACCESS_KEY,
    S3TestBucket,
)
from tests.support.redis_scan import flatten_redis
from tests.support.stack import eventually, stack_env, unique
from tests.test_metrics import MeteredWorker, scrape, value
from tether.core.results import Resolution
from tether.dev.redis_server import RedisServer, free_port
from tether.ids import new_id
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.producer import Producer
from tether.producer.submission import run_message
from tether.runs.contract import RunRef, RunRequest, WireRequest
from tether.runs.queue.redis import RedisRunQueue
from tether.runs.usage.base import utc_day
from tether.runs.webhooks.delivery import WEBHOOK_TASK, Delivery
from tether.settings import Settings
from tether.worker.canvas import CANVAS_RUN_TASK

NS = "forge"
QUEUE = "forge-q"


def refused(worker: MeteredWorker) -> float:
    """The worker's ``tether_messages_refused_total{reason="unregistered"}``."""
    samples = scrape(f"http://127.0.0.1:{worker.metrics_port}/metrics")
    return value(samples, "tether_messages_refused_total", reason="unregistered")


@dataclass
class World:
    server: RedisServer
    admin: redis.Redis
    bucket: S3TestBucket
    worker: MeteredWorker

    def tenant_url(self, tenant: str) -> str:
        """A tenant's own credential, as docs/deployment.md makes it (see :func:`tenant_users`):
        its keys (the trust model's rules) and the broker's."""
        return f"redis://{quote(tenant)}:{quote(PASSWORDS[tenant])}@127.0.0.1:{self.server.port}/0"

    def producer(self, tenant: str, **more: object) -> Producer:
        url = self.tenant_url(tenant)
        return Producer(
            Settings(
                **more,  # type: ignore[arg-type]
                broker_url=url,
                redis_url=url,
                namespace=NS,
                queue=QUEUE,
                tenant=tenant,
                store_url=f"s3://{self.bucket.bucket}/{NS}",
                s3_endpoint_url=self.bucket.endpoint_url,
            )
        )

    def stored(self) -> dict[str, bytes]:
        """Every object of the bucket, by key: heads and archives, byte for byte."""
        s3 = self.bucket.client()
        listed = s3.list_objects_v2(Bucket=self.bucket.bucket).get("Contents", [])
        return {
            o["Key"]: s3.get_object(Bucket=self.bucket.bucket, Key=o["Key"])["Body"].read()
            for o in listed
        }

    def log_since(self, mark: int) -> str:
        """What the worker logged after :meth:`mark` returned ``mark`` (the worker serves
        every test of the module: an earlier test's lines must not pass for this one's)."""
        return self.worker.log_text()[mark:]

    def mark(self) -> int:
        """Where the worker's log is now (see :meth:`log_since`)."""
        return len(self.worker.log_text())

    def session_keys(self, tenant: str, session_id: str) -> dict[bytes, bytes]:
        """Every Redis key of the tenant, dumped (the session's stream, records, index)."""
        pattern = RedisKeys(NS).tenant_pattern(tenant)
        return {k: self.admin.dump(k) or b"" for k in self.admin.scan_iter(match=pattern)}


#: The tenants' passwords, as an operator would choose them.
PASSWORDS = {"team-a": "pw-team-a-secret", "team-b": "pw-team-b-secret"}
#: The marker of the steps in docs/deployment.md that make the tenants' users.
WALK = "<!-- deployment-walk: tenant users -->"


def tenant_users(server: RedisServer, admin_password: str) -> dict[str, str]:
    """Follow docs/deployment.md's steps for per-tenant users, as written (its bash block, run
    by bash with the `tether` of this venv on PATH), against ``server``; the environment the
    steps leave (team-a's producer settings)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "deployment.md").read_text()
    block = text.split(WALK, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    env = {
        **stack_env(server.url, "http://127.0.0.1:1", "unused"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "TETHER_NAMESPACE": NS,
        "ADMIN_PASSWORD": admin_password,
        "REDIS_HOST": "127.0.0.1",
        "REDIS_PORT": str(server.port),
        "TEAM_A_PASSWORD": PASSWORDS["team-a"],
        "TEAM_B_PASSWORD": PASSWORDS["team-b"],
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block + "\nenv -0"],
        env=env, capture_output=True, check=True, timeout=120,
    )  # fmt: skip
    pairs = (item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)
    return dict(pairs)


@pytest.fixture(scope="module")
def world(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One Redis with the tenants' users and one worker for the whole module (each start costs
    seconds): every test isolates itself with sessions of its own, compares counters and the
    worker's log with what they were when it began (:meth:`World.mark`), and its bucket is
    this module's own (no test here resets moto)."""
    password = "admin-" + "x" * 24
    bucket = S3TestBucket(endpoint_url=moto_endpoint, bucket=f"forge-{new_id('b')[-8:].lower()}")
    with pytest.MonkeyPatch.context() as patch:
        for name, setting in {
            "AWS_ACCESS_KEY_ID": FAKE_ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": FAKE_SECRET_ACCESS_KEY,
            "AWS_DEFAULT_REGION": FAKE_REGION,
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        }.items():
            patch.setenv(name, setting)
        for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            patch.delenv(name, raising=False)
        bucket.client().create_bucket(Bucket=bucket.bucket)
        server = RedisServer(unix_socket=False, password=password).start()
        admin: redis.Redis | None = None
        worker: MeteredWorker | None = None
        try:
            left = tenant_users(server, password)
            assert left["TETHER_REDIS_URL"] == left["TETHER_BROKER_URL"]
            assert left["TETHER_REDIS_URL"].startswith("redis://team-a:")
            admin = redis_from_url(server.url)
            env = stack_env(server.url, bucket.endpoint_url, bucket.bucket)
            env.update(
                TETHER_NAMESPACE=NS,
                TETHER_QUEUE=QUEUE,
                TETHER_STORE_URL=f"s3://{bucket.bucket}/{NS}",
            )  # the default trust rule: nothing about TETHER_REGISTERED_RUNS_ONLY is set
            env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # `tether worker` makes a fresh one
            log_dir = tmp_path_factory.mktemp("forge")
            worker = MeteredWorker(env, log_dir, free_port(), queue=QUEUE, pool=1)
            worker.start()
            yield World(server, admin, bucket, worker)
        finally:
            if worker is not None:
                worker.stop()
            if admin is not None:
                admin.close()
            server.close()


def forged(session_id: str, **fields: object) -> WireRequest:
    """A run request for team-a's session, as team-b writes it (never registered)."""
    run_id = new_id("run")
    doc = {"run_id": run_id, "request_id": run_id, "tenant": "team-a", "session_id": session_id}
    return WireRequest.of(RunRequest.model_validate({**doc, "agent": "notes", **fields}))


def test_a_run_message_forged_by_another_tenant_is_refused_and_changes_nothing(
    world: World,
) -> None:
    session = unique()
    team_a = world.producer("team-a")
    try:
        assert team_a.run(session, "remember A's fact", agent="notes", wait_s=60).ok
        stored, in_redis = world.stored(), world.session_keys("team-a", session)
        mark, before = world.mark(), refused(world.worker)
        assert any(f"/team-a/{session}/" in key for key in stored)

        # team-b's own credential: its keys, the broker; team-a's keys are refused to it
        b_url = world.tenant_url("team-b")
        with pytest.raises(redis.exceptions.NoPermissionError):
            redis_from_url(b_url).get(RedisKeys(NS).run("team-a", session, "run-x"))
        celery = Celery("team-b", broker=b_url)
        celery.conf.broker_transport_options = {"global_keyprefix": f"{NS}-celery:"}
        run = forged(session, input="remember B WAS HERE")
        approve = Resolution(call_id="c-1", action="approve")
        approval = forged(session, input=None, resolutions=[approve])
        try:
            for wire in (run, approval):
                celery.send_task(**run_message(wire, QUEUE))
            # a canvas task, which registers its run itself unless the mode forbids it
            canvas = {"agent": "notes", "tenant": "team-a"}
            celery.send_task(CANVAS_RUN_TASK, (session, "remember B"), canvas, queue=QUEUE)
        finally:
            celery.close()

        assert eventually(lambda: refused(world.worker) >= before + 3, timeout_s=60)
        assert world.stored() == stored  # head and archive byte-identical
        assert world.session_keys("team-a", session) == in_redis  # no record, event, session
        runs = RedisRunQueue(world.admin, RedisKeys(NS), result_ttl_s=3600)
        assert runs.get(RunRef("team-a", session, run.request.run_id)) is None
        assert "refused run message" in world.log_since(mark)
        # team-a's own runs still run: the registered-only worker serves registered runs
        assert team_a.run(session, "recall", agent="notes", wait_s=60).output == "A's fact"
    finally:
        team_a.close()


def mismatched(worker: MeteredWorker) -> float:
    """The worker's ``tether_messages_refused_total{reason="mismatched"}``."""
    samples = scrape(f"http://127.0.0.1:{worker.metrics_port}/metrics")
    return value(samples, "tether_messages_refused_total", reason="mismatched")


def test_a_record_in_a_tenants_own_keyspace_cannot_name_another_tenants_session(
    world: World,
) -> None:
    """team-a writes, with its own credential and in its own keyspace, a run record whose
    request names team-b's session, queues it on its own session and sends the wake-up: the
    worker loaded team-b's head, called the model on team-b's memory and ran team-b's tools
    (only the final append was fenced out). The request in a record must name the run its key
    does; this one is refused, counted, and nothing of team-b's is read or written."""
    a_session, b_session = unique(), unique()
    team_b = world.producer("team-b")
    try:
        assert team_b.run(b_session, "remember B's PIN", agent="notes", wait_s=60).ok
        stored, b_keys = world.stored(), world.session_keys("team-b", b_session)
        mark, before = world.mark(), mismatched(world.worker)

        a_url = world.tenant_url("team-a")
        a = redis_from_url(a_url)
        keys = RedisKeys(NS)
        run_ids = []
        for text in ("remember A WAS HERE", "recall"):  # a write, then a read of B's memory
            run_id = new_id("run")
            run_ids.append(run_id)
            doc = {"run_id": run_id, "request_id": run_id, "agent": "notes", "input": text}
            for_b = RunRequest.model_validate({**doc, "tenant": "team-b", "session_id": b_session})
            # the record a producer writes, by hand: team-a's credential may write these keys
            a.set(keys.request("team-a", a_session, run_id), run_id, ex=3600)
            record = {
                "status": "QUEUED",
                "request": WireRequest.of(for_b).text,
                "tenant": "team-a",
                "session_id": a_session,
                "request_id": run_id,
                "submitted_at_ms": 0,
            }
            a.hset(keys.run("team-a", a_session, run_id), mapping=record)
            a.rpush(keys.pending("team-a", a_session), run_id)
            wake = RunRequest.model_validate({**doc, "tenant": "team-a", "session_id": a_session})
            celery = Celery("team-a", broker=a_url)
            celery.conf.broker_transport_options = {"global_keyprefix": f"{NS}-celery:"}
            try:
                celery.send_task(**run_message(WireRequest.of(wake), QUEUE))
            finally:
                celery.close()

        assert eventually(lambda: mismatched(world.worker) >= before + 2, timeout_s=60)
        assert world.stored() == stored  # team-b's head and archive byte-identical
        assert world.session_keys("team-b", b_session) == b_keys
        for run_id in run_ids:  # nothing ran: no result, no output of B's memory for team-a
            assert a.hget(keys.run("team-a", a_session, run_id), "result") is None
        assert "its record holds a request for tenant 'team-b'" in world.log_since(mark)
        assert team_b.run(b_session, "recall", agent="notes", wait_s=60).output == "B's PIN"
        a.close()
    finally:
        team_b.close()


def test_a_webhook_task_forged_by_another_tenant_is_refused_and_sends_nothing(
    world: World,
) -> None:
    """team-b publishes ``tether.webhook`` tasks for team-a: one carrying a whole delivery (its
    text, its URL, a negative attempt count), one naming a delivery id. The worker signed and
    sent the first with team-a's secret (a signing oracle) and wrote failures to the namespace's
    dead letters. A task now names a delivery a worker stored under ``{~webhooks}``, which no
    tenant can write: both are refused, counted, and nothing is sent or written."""
    forged = Delivery(
        id="wh-run-forged-completed",
        url="http://127.0.0.1:9/hook",
        tenant="team-a",
        session_id="s-a",
        run_id="run-forged",
        status="COMPLETED",
        body='{"type":"run.completed","output_summary":"APPROVED: pay team-b"}',
        attempts=-4,
    )

    def unstored() -> float:
        samples = scrape(f"http://127.0.0.1:{world.worker.metrics_port}/metrics")
        return value(samples, "tether_messages_refused_total", reason="unstored_webhook")

    mark, before = world.mark(), unstored()
    celery = Celery("team-b", broker=world.tenant_url("team-b"))
    celery.conf.broker_transport_options = {"global_keyprefix": f"{NS}-celery:"}
    try:
        celery.send_task(WEBHOOK_TASK, kwargs={"delivery": forged.model_dump_json()}, queue=QUEUE)
        celery.send_task(WEBHOOK_TASK, kwargs={"delivery_id": forged.id}, queue=QUEUE)
    finally:
        celery.close()

    assert eventually(lambda: unstored() >= before + 2, timeout_s=60)
    assert list(world.admin.scan_iter(match=f"{NS}:{{~webhooks}}*")) == []  # no dead letter
    assert "refused webhook task" in world.log_since(mark)


def test_no_tenant_can_write_a_key_shared_with_other_tenants(world: World) -> None:
    """#47: the active-session index, the completion feed, the tenants index and every usage
    counter are outside a tenant's credential: team-b's ``SET``, ``DEL``, ``ZADD`` and
    ``XADD`` there are refused by the server (NOPERM), so no tenant can break recovery or the
    console for everyone, erase another's marks, or reset a budget (its own included). Before,
    the documented ACL let every tenant write the index and the feed, and a stray value broke
    every submit until a repair path deleted it (and that repair's test was flaky). team-a's
    runs go on as before."""
    keys = RedisKeys(NS)
    b = redis_from_url(world.tenant_url("team-b"))
    day = utc_day()
    shared = [*keys.active_shards(), keys.done(0), keys.tenants(), keys.waiting()]
    budgets = [*keys.usage_shard("team-b", day, 0), *keys.tenant_usage("team-b", day)]
    try:
        for key in [*shared, *budgets, *keys.tenant_usage("team-a", day)]:
            for command in (("SET", key, "poison"), ("DEL", key), ("ZADD", key, 1, "x")):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    b.execute_command(*command)
        with pytest.raises(redis.exceptions.NoPermissionError):
            b.xadd(keys.done(0), {"run_id": "run-x", "tenant": "team-a", "status": "FAILED"})
        assert b.hgetall(budgets[0]) == {}  # its own usage: readable, not writable
    finally:
        b.close()
    team_a = world.producer("team-a")
    try:
        session = unique()
        assert team_a.run(session, "remember A's fact", agent="notes", wait_s=60).ok
        assert team_a.run(session, "recall", agent="notes", wait_s=60).output == "A's fact"
    finally:
        team_a.close()


def test_run_messages_carry_no_text_of_the_run_when_workers_run_registered_runs_only(
    world: World,
) -> None:
    """Every tenant that submits can read the broker's queues (kombu needs it), so a run
    message with the request in it showed one tenant's inputs to the others. With
    TETHER_REGISTERED_RUNS_ONLY on the producer too, a message carries the run's ids and agent
    only; the worker runs the registered copy, so the runs work as before."""
    secret_fact = "A's fact, confidential"
    wire = forged(unique(), input=secret_fact, metadata={"patient": "John Doe"})
    woken = run_message(wire, QUEUE, wake_only=True)["kwargs"]["request"]
    assert secret_fact not in woken and "John Doe" not in woken
    assert WireRequest.of(RunRequest.model_validate_json(woken)).request.ref == wire.request.ref

    session = unique()
    team_a = world.producer("team-a", registered_runs_only=True)
    try:
        assert team_a.run(session, f"remember {secret_fact}", agent="notes", wait_s=60).ok
        assert team_a.run(session, "recall", agent="notes", wait_s=60).output == secret_fact
    finally:
        team_a.close()


def test_a_canvas_task_given_another_tenants_run_id_is_refused(world: World) -> None:
    """A canvas task's run is ``run-<task id>``, and run ids travel in the broker's messages:
    team-b gave a ``tether.canvas.run`` task the id of team-a's (already finished) run, and the
    worker, finding that run registered, published its result (team-a's output) to the shared
    result backend, where team-b subscribed. A canvas task now needs a run registered as *its*
    request (``canvas:<task id>``): refused, counted, nothing published."""
    session = unique()
    team_a = world.producer("team-a")
    try:
        done = team_a.run(session, "remember A's merger plan", agent="notes", wait_s=60)
        assert done.ok
    finally:
        team_a.close()
    mark, before = world.mark(), mismatched(world.worker)
    celery = Celery("team-b", broker=world.tenant_url("team-b"))
    celery.conf.broker_transport_options = {"global_keyprefix": f"{NS}-celery:"}
    try:
        celery.send_task(
            CANVAS_RUN_TASK,
            (session, "recall"),
            {"agent": "notes", "tenant": "team-a"},
            queue=QUEUE,
            task_id=done.run_id.removeprefix("run-"),
        )
    finally:
        celery.close()
    assert eventually(lambda: mismatched(world.worker) > before, timeout_s=60)
    assert "registered as request" in world.log_since(mark)
    published = flatten_redis(world.admin, match=f"{NS}-celery-results:*")
    assert not [k for k, v in published.items() if b"merger plan" in v]


CHAIN_CLIENT = """
import json, sys
from celery import chain
from tether.worker.canvas import tether_run
a, b, forged_tenant = sys.argv[1:4]
if forged_tenant:  # team-b's own first step, then a step naming team-a's session
    result = chain(tether_run.s(a, "remember b's fact", agent="notes"),
                   tether_run.s(b, agent="echo", tenant=forged_tenant)).apply_async()
    print(json.dumps({"last": result.id, "first": result.parent.id}))
else:
    result = chain(tether_run.s(a, "remember A's plan", agent="notes"),
                   tether_run.s(b, agent="echo")).apply_async()
    print(json.dumps({"last": result.id, "first": result.parent.id}))
"""


def _apply_chain(world: World, tmp_path: Path, tenant: str, *args: str) -> dict[str, str]:
    """Apply a chain from a process holding ``tenant``'s credential (canvas reads its settings
    from the environment); what it printed."""
    url = world.tenant_url(tenant)
    env = stack_env(url, world.bucket.endpoint_url, world.bucket.bucket)
    env.update(TETHER_NAMESPACE=NS, TETHER_QUEUE=QUEUE, TETHER_TENANT=tenant)
    script = tmp_path / "chain_client.py"
    script.write_text(CHAIN_CLIENT)
    done = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_chain_runs_under_the_default_rule_with_a_tenants_own_credential(
    world: World, tmp_path: Path
) -> None:
    """#47: with TETHER_REGISTERED_RUNS_ONLY on (the default), a chain's later steps used to be
    refused (Celery applies them in the worker, from the message); now the applying process
    grants them in its tenant's keyspace, and the worker registers each from its grant and the
    previous step's recorded output. team-a applies the chain with its restricted credential."""
    a, b = unique("chain-a"), unique("chain-b")
    ids = _apply_chain(world, tmp_path, "team-a", a, b, "")
    team_a = world.producer("team-a")
    try:
        first = team_a.handle(f"run-{ids['first']}").result(timeout=120)
        assert first.output == "noted: A's plan" and first.session_id == a
        # the worker registers the second step once the first finished (not before)
        eventually(lambda: team_a.record(f"run-{ids['last']}") is not None, timeout_s=60)
        last = team_a.handle(f"run-{ids['last']}").result(timeout=120)
        # the first step's recorded output went on as the second step's input
        assert last.ok and last.output == "echo: noted: A's plan" and last.session_id == b
    finally:
        team_a.close()


def test_a_chain_step_forged_into_another_tenants_session_is_refused(
    world: World, tmp_path: Path
) -> None:
    """team-b applies its own first step whose chain goes on into team-a's session: team-a
    granted no such step, so the worker refuses to register it, and team-a's keys are what
    they were."""
    session = unique("victim")
    team_a = world.producer("team-a")
    try:
        assert team_a.run(session, "remember A's fact", agent="notes", wait_s=60).ok
        in_redis, mark = world.session_keys("team-a", session), world.mark()
        ids = _apply_chain(world, tmp_path, "team-b", unique("b-own"), session, "team-a")
        eventually(lambda: "was not granted by its tenant" in world.log_since(mark), 60)
        assert team_a.record(f"run-{ids['first']}") is None  # team-b's own step, not A's
        assert team_a.record(f"run-{ids['last']}") is None  # never registered in A's keyspace
        assert world.session_keys("team-a", session) == in_redis
        assert team_a.run(session, "recall", agent="notes", wait_s=60).output == "A's fact"
    finally:
        team_a.close()
