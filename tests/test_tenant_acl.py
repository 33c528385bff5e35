"""#19: one Redis ACL user per tenant is enough to isolate tenants at the server, because every
key of a tenant starts ``<ns>:{<tenant>/`` (layout v2). Tenant acme's credential runs its whole
producer side (submit, find, read, cancel, follow its own completions, tail its sessions) and
gets ``NOPERM`` for anything of tenant bob. On a private redis-server with ACL users; the worker
side runs in-process with the namespace-wide credential, the broker is the admin URL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import redis

from tests.support.crash import Backends, worker_runtime
from tests.support.moto_server import S3TestBucket
from tether.dev.redis_server import RedisServer
from tether.errors import ConfigurationError, PermissionDenied
from tether.keys import RedisKeys
from tether.persistence.archives.redis_hint import RedisArchiveHint
from tether.persistence.redis_conn import redis_from_url
from tether.persistence.storage_url import open_storage
from tether.persistence.streams.redis import RedisEventStream
from tether.producer import AsyncProducer, Producer
from tether.producer.ops.cli.runs import tail as cli_tail
from tether.producer.ops.console.backends import open_backends
from tether.producer.ops.console.runs_view import list_runs
from tether.runs.contract import RunRef
from tether.runs.leases.redis import RedisLeaseManager
from tether.runs.queue.base import CancelOutcome
from tether.runs.queue.redis import RedisRunQueue
from tether.runs.queue.redis._common import NO_RUN
from tether.settings import Settings
from tether.worker.engine.checkpoints.redis import RedisCheckpointStore
from tether.worker.engine.cycle import drain

NS = "acl"


def tenant_acl(keys: RedisKeys, tenant: str) -> list[str]:
    """The ACL rules of one tenant's producer credential (as docs/trust-model.md shows them)."""
    # its keyspace, its producers' feeds, its usage read-only: no key shared with another
    # tenant, no budget counter, is writable (#47)
    return ["on", *keys.tenant_acl_keys(tenant), "+@all", "-@admin", "-@dangerous"]


@dataclass
class World:
    admin: redis.Redis
    server: RedisServer
    bucket: S3TestBucket

    def url_for(self, user: str, password: str) -> str:
        return f"redis://{quote(user)}:{quote(password)}@127.0.0.1:{self.server.port}/0"

    def settings(self, tenant: str, **more: object) -> Settings:
        password = f"pw-{tenant}-secret"
        self.admin.execute_command(
            "ACL", "SETUSER", tenant, "reset", f">{password}", *tenant_acl(RedisKeys(NS), tenant)
        )
        return Settings(
            **more,  # type: ignore[arg-type]
            broker_url=self.server.url,  # the broker keeps its own credential
            redis_url=self.url_for(tenant, password),
            namespace=NS,
            tenant=tenant,
            store_url=f"s3://{self.bucket.bucket}/{NS}",
            s3_endpoint_url=self.bucket.endpoint_url,
        )

    def producer(self, tenant: str) -> Producer:
        return Producer(self.settings(tenant))

    def worker_backends(self) -> Backends:
        keys = RedisKeys(NS)
        store, archive = open_storage(
            f"s3://{self.bucket.bucket}/{NS}", endpoint_url=self.bucket.endpoint_url
        )
        return Backends(
            name="admin",
            store=store,
            archive=archive,
            stream=RedisEventStream(self.admin, keys=keys),
            leases=RedisLeaseManager(self.admin, keys=keys),
            runs=RedisRunQueue(self.admin, keys, result_ttl_s=3600),
            hint=RedisArchiveHint(self.admin, keys),
            checkpoints=RedisCheckpointStore(self.admin, keys, ttl_s=3600),
            expire_lease=lambda t, s: None,
        )


@pytest.fixture
def world(s3_bucket: S3TestBucket) -> Iterator[World]:
    server = RedisServer(unix_socket=False, password="admin-" + "x" * 24).start()
    admin = redis_from_url(server.url)
    try:
        yield World(admin, server, s3_bucket)
    finally:
        admin.close()
        server.close()


def test_a_tenant_credential_runs_its_producer_side(world: World) -> None:
    acme = world.producer("acme")
    try:
        first = acme.run_async("s-1", "1+1", agent="calculator")
        queued = acme.run_async("s-1", "2+2", agent="calculator")
        ref = acme.locate(first.run_id)
        assert ref == RunRef("acme", "s-1", first.run_id)
        assert acme.runs.get(ref) is not None
        assert acme.cancel(queued.run_id) is CancelOutcome.CANCELLED

        worker = worker_runtime(world.worker_backends(), "w-admin")
        assert drain(worker, "acme", "s-1") == 2  # the worker holds the namespace credential

        # acme's own completion feed settles its handle; its session's events are readable
        assert first.result(timeout=30).output == "2"
        assert next(e.run_id for e in acme.event_stream.read("acme", "s-1")) == first.run_id
        assert queued.run_result(timeout=30).status == "CANCELLED"
    finally:
        acme.close()


def test_a_tenant_credential_gets_noperm_for_another_tenant(world: World) -> None:
    acme, bob = world.producer("acme"), world.producer("bob")
    try:
        theirs = bob.run_async("s-bob", "3+3", agent="calculator")
        bob_ref = bob.locate(theirs.run_id)
        assert bob_ref is not None
        drain(worker_runtime(world.worker_backends(), "w-admin"), "bob", "s-bob")
        assert theirs.result(timeout=30).output == "6"
        keys = acme.keys

        with pytest.raises(ConfigurationError, match="denied"):
            acme.runs.get(bob_ref)  # bob's run record
        with pytest.raises(ConfigurationError, match="denied"):
            acme.runs.locate("bob", theirs.run_id)  # bob's run-id index
        with pytest.raises(ConfigurationError, match="denied"):
            acme.runs.request_cancel(bob_ref)
        with pytest.raises(ConfigurationError, match="denied"):
            acme.event_stream.read("bob", "s-bob")  # bob's events
        for feed in (keys.producer_done(bob.feed, 0), keys.done(0)):  # bob's, everyone's feed
            with pytest.raises(redis.exceptions.NoPermissionError):
                acme.redis.xrevrange(feed, count=1)
        with pytest.raises(redis.exceptions.NoPermissionError):  # the index is write-only here
            acme.redis.zrange(keys.active("bob", "s-bob"), 0, -1)
        with pytest.raises(redis.exceptions.NoPermissionError):
            acme.redis.keys("*")  # no listing of the keyspace (@dangerous)
        # a run submitted for bob with acme's credential is refused before anything is written
        with pytest.raises(ConfigurationError, match="denied"):
            acme.run_async("s-bob", "9+9", agent="calculator", tenant="bob")
        assert (
            bob.runs.get(bob_ref) is not None
            and world.admin.llen(keys.pending("bob", "s-bob")) == 0
        )
    finally:
        acme.close()
        bob.close()


def test_a_cross_tenant_refusal_says_the_credential_may_not_act_for_that_tenant(
    world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """#29 item 6: not "grant more permissions" (the wrong fix) but "not your tenant"; for the
    tails too, which read Redis only as they are iterated (blocking, asyncio, and the CLI)."""
    acme = world.producer("acme")
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    for name, value in {
        "TETHER_REDIS_URL": acme.settings.redis_url,
        "TETHER_BROKER_URL": acme.settings.redis_url,
        "TETHER_NAMESPACE": NS,
        "TETHER_TENANT": "acme",
    }.items():
        monkeypatch.setenv(name, value)

    async def first_of(follow: Callable[[AsyncProducer], AsyncIterator[object]]) -> object:
        async with AsyncProducer(acme.settings) as producer:
            return await anext(follow(producer))

    try:
        for attempt in (
            lambda: acme.run_async("s-bob", "9+9", agent="calculator", tenant="bob"),
            lambda: acme.approve("s-bob", "call_1", agent="calculator", tenant="bob"),
            lambda: acme.locate("run-x", tenant="bob"),
            lambda: next(acme.tail("s-bob", tenant="bob", idle_timeout_s=1)),
            lambda: next(acme.stream("s-bob", tenant="bob", idle_timeout_s=1)),
            lambda: asyncio.run(first_of(lambda p: p.tail("s-bob", "bob", idle_timeout_s=1))),
            lambda: asyncio.run(first_of(lambda p: p.stream("s-bob", "bob", idle_timeout_s=1))),
            lambda: cli_tail("s-bob", tenant="bob", idle_timeout_s=1, as_json=True),
            lambda: cli_tail("s-bob", tenant="bob", idle_timeout_s=1, tokens=True),
        ):
            with pytest.raises(PermissionDenied) as refused:
                attempt()
            message = str(refused.value)
            assert "may not act for that tenant" in message and "'bob'" in message
            assert "grant" not in message
    finally:
        acme.close()


def test_forged_completion_entries_are_pointers_the_console_checks(world: World) -> None:
    """#29 item 9, #47: no tenant's credential may append to the namespace completion feed any
    more (NOPERM); the console still treats its entries as untrusted (a deployment that keeps
    the old ACL, which granted tenants write access, docs/upgrading.md): it shows each run as
    its own record tells it, never an entry's status, and an entry naming no valid run is
    skipped (a malformed one used to raise InvalidId out of the runs page)."""
    acme, bob = world.producer("acme"), world.producer("bob")
    console = open_backends(
        Settings(
            redis_url=world.server.url,
            namespace=NS,
            tenant="acme",
            store_url=f"s3://{world.bucket.bucket}/{NS}",
            s3_endpoint_url=world.bucket.endpoint_url,
        )
    )
    try:
        queued = acme.run_async("s-1", "1+1", agent="calculator")  # no worker: stays QUEUED
        feed = bob.keys.done(0)
        forged = [
            {"run_id": queued.run_id, "tenant": "acme", "session_id": "s-1", "status": "FAILED"},
            {"run_id": "run-made-up", "tenant": "acme", "session_id": "s-1", "status": "COMPLETED"},
            {"run_id": "x", "tenant": "acme", "session_id": "bad id!", "status": "COMPLETED"},
            {"status": "COMPLETED"},
        ]
        with pytest.raises(redis.exceptions.NoPermissionError):
            bob.redis.xadd(feed, forged[0])  # bob's credential writes no shared key
        for entry in forged:
            world.admin.xadd(feed, entry)  # as under the old ACL, which let tenants append
        rows = list_runs(console, "acme")
        assert [(r.run_id, r.status) for r in rows] == [(queued.run_id, "QUEUED")]
        positions = console.runs.read_done(b"0-0", block_ms=1)
        assert len(positions) == len(forged)  # every entry still advances a reader
        assert [ref for _, ref in positions][2:] == [NO_RUN, NO_RUN]
    finally:
        console.close()
        acme.close()
        bob.close()


def test_a_restricted_producer_refuses_to_run_with_the_rule_off(world: World) -> None:
    """#47: TETHER_REGISTERED_RUNS_ONLY=false on a producer whose credential is one tenant's (a
    deployment with per-tenant users) is refused at once, naming the setting: with the rule off,
    any tenant that can publish to the broker can act for another. The namespace's own
    credential may turn it off (a trusted deployment)."""
    trusting = world.settings("acme", registered_runs_only=False)
    with pytest.raises(ConfigurationError, match="TETHER_REGISTERED_RUNS_ONLY is false"):
        Producer(trusting)

    async def first_submit() -> None:
        producer = AsyncProducer(trusting)
        try:
            await producer.run_async("s-1", "hi", agent="echo")
        finally:
            await producer.aclose()

    with pytest.raises(ConfigurationError, match="restricted to its tenant"):
        asyncio.run(first_submit())
    operator = trusting.model_copy(update={"redis_url": world.server.url})
    Producer(operator).close()  # the namespace's credential: allowed, it is trusted
