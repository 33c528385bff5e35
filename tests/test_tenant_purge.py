"""#19: `tether sessions purge --tenant T` removes everything of one tenant (heads, archive
segments, every Redis key under its tags) and nothing of any other; busy sessions are skipped,
never forced, and a second purge finishes the job. On redis-server and S3 over HTTP (moto)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.support.crash import Backends, real_backends, worker_runtime
from tests.support.moto_server import S3TestBucket
from tests.support.stack import stack_env
from tether import SessionLogReader
from tether.core.items import UserMessage
from tether.ids import new_id
from tether.keys import RedisKeys
from tether.persistence.archives.base import EventArchive
from tether.producer.ops.sessions_admin import delete_session
from tether.producer.ops.tenant_purge import PurgeReport, purge_tenant
from tether.runs.contract import RunRef, RunRequest
from tether.runs.queue.base import submit
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices

TENANT_A = "acme"
TENANT_B = "acme-2"  # its tag {acme-2/ must not match A's SCAN pattern {acme/*
SESSIONS = ("s-1", "s-2", "s-3")  # the same ids in both tenants
CLI_TIMEOUT_S = 90
_counter = itertools.count()


@dataclass
class World:
    backends: Backends
    keys: RedisKeys
    client: redis.Redis
    bucket: S3TestBucket
    runtime: EngineServices
    redis_url: str
    workdir: Path

    def purge(self, tenant: str = TENANT_A, *, dry_run: bool = False) -> PurgeReport:
        b = self.backends
        return purge_tenant(b.store, b.archive, self.client, self.keys, tenant, dry_run=dry_run)

    def submit(self, tenant: str, session_id: str, text: str) -> RunRequest:
        n = next(_counter)
        request = RunRequest(
            run_id=f"run-{n}-{new_id('x')[-6:]}",
            request_id=f"req-{n}",
            tenant=tenant,
            session_id=session_id,
            agent="calculator",
            input=text,
        )
        submit(self.runtime.runs, request)
        return request

    def apply(self, tenant: str, session_id: str, text: str) -> None:
        self.submit(tenant, session_id, text)
        assert drain(self.runtime, tenant, session_id) == 1

    def tag_keys(self, tenant: str) -> set[bytes]:
        """Every Redis key under the tenant's tags (pattern written out, not the code's)."""
        return set(self.client.scan_iter(match=f"{self.keys.prefix}:{{{tenant}/*", count=500))

    def namespace_dump(self) -> dict[bytes, bytes | None]:
        """Every key of the namespace with its serialized value."""
        names = self.client.scan_iter(match=f"{self.keys.prefix}:*", count=500)
        return {name: self.client.dump(name) for name in names}

    def objects(self, tenant: str | None = None) -> dict[str, str]:
        """S3 objects (key -> ETag) of one tenant, or of the whole namespace."""
        prefix = f"{self.keys.prefix}/" + (f"v1/{tenant}/" if tenant else "")
        pages = self.bucket.client().get_paginator("list_objects_v2")
        return {
            obj["Key"]: obj["ETag"]
            for page in pages.paginate(Bucket=self.bucket.bucket, Prefix=prefix)
            for obj in page.get("Contents", [])
        }

    def heads(self, tenant: str) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for session_id in SESSIONS:
            stored = self.backends.store.load(tenant, session_id)
            out[session_id] = None if stored is None else stored.version
        return out


@pytest.fixture
def world(
    redis_client: redis.Redis, redis_url: str, s3_bucket: S3TestBucket, tmp_path: Path
) -> World:
    """Two tenants with three sessions each, two runs per session (archived segments, run
    records, request ids), and in tenant A the Redis leftovers of a session deleted earlier."""
    backends = real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
    keys: RedisKeys = backends.stream._keys
    runtime = worker_runtime(backends, "w", archive_batch_events=4)
    w = World(backends, keys, redis_client, s3_bucket, runtime, redis_url, tmp_path)
    for tenant in (TENANT_A, TENANT_B):
        for session_id in (*SESSIONS, "s-old"):
            for text in ("1+1", "2+2"):
                w.apply(tenant, session_id, text)
    # only its fence and released keys stay: a session that Redis alone still knows
    delete_session(backends.store, backends.archive, redis_client, keys, TENANT_A, "s-old")
    assert {k.decode().rsplit(":", 1)[1] for k in w.tag_keys(TENANT_A) if b"{acme/s-old}" in k} == {
        "fence",
        "released",
    }
    for tenant in (TENANT_A, TENANT_B):
        assert all(w.heads(tenant).values())
        assert any("/events/" in key for key in w.objects(tenant))
    return w


def test_purge_removes_all_of_one_tenant_and_nothing_of_another(world: World) -> None:
    b_keys, b_heads, b_objects = (
        world.tag_keys(TENANT_B),
        world.heads(TENANT_B),
        world.objects(TENANT_B),
    )
    b_values = {k: world.client.dump(k) for k in b_keys}
    # the tenant's run-id index (tag {acme/~runs:<k>}) is there, and must go too
    assert any(b"{acme/~" in name for name in world.tag_keys(TENANT_A))
    segments = sum("/events/" in key for key in world.objects(TENANT_A))

    report = world.purge()

    assert report.complete and report.skipped == () and report.next_step is None
    assert report.sessions == ("s-1", "s-2", "s-3", "s-old")
    assert (report.heads, report.segments) == (3, segments)
    assert report.runs == 6 and report.redis_keys > 0 and report.redis_keys_left == 0
    assert world.tag_keys(TENANT_A) == set()
    assert world.objects(TENANT_A) == {}
    assert world.backends.store.list_session_ids(TENANT_A) == []
    # tenant B: same keys with the same values, same heads, same objects
    assert world.tag_keys(TENANT_B) == b_keys
    assert {k: world.client.dump(k) for k in b_keys} == b_values
    assert world.heads(TENANT_B) == b_heads
    assert world.objects(TENANT_B) == b_objects


def test_a_purged_tenant_starts_again_from_nothing(world: World) -> None:
    world.purge()
    world.apply(TENANT_A, "s-1", "3+3")
    head = world.backends.store.load(TENANT_A, "s-1")
    assert head is not None
    memory = head.snapshot.memory.items
    assert [i.content for i in memory if isinstance(i, UserMessage)] == ["3+3"]
    report = SessionLogReader(world.backends.store, world.backends.archive).verify(
        "s-1", tenant=TENANT_A
    )
    assert report.ok, report.problems


def test_a_dry_run_changes_nothing_and_predicts_the_purge(world: World) -> None:
    keys_before, objects_before = world.namespace_dump(), world.objects()

    preview = world.purge(dry_run=True)

    assert world.namespace_dump() == keys_before
    assert world.objects() == objects_before
    assert preview.dry_run and preview.complete and preview.runs == 0
    real = world.purge()
    assert not real.dry_run
    assert (preview.sessions, preview.heads, preview.segments, preview.redis_keys) == (
        real.sessions,
        real.heads,
        real.segments,
        real.redis_keys,
    )
    assert len(keys_before) - len(world.namespace_dump()) >= real.redis_keys


def test_a_busy_session_is_skipped_and_a_second_purge_completes(world: World) -> None:
    lease = world.backends.leases.acquire(TENANT_A, "s-2", "busy-worker", 60_000)
    assert lease is not None
    queued = world.submit(TENANT_A, "s-queued", "4+4")  # a session only Redis knows, with a run

    preview = world.purge(dry_run=True)
    assert [s.session_id for s in preview.skipped] == ["s-2", "s-queued"]
    report = world.purge()

    assert not report.complete
    assert [s.session_id for s in report.skipped] == ["s-2", "s-queued"]
    assert report.next_step is not None and "cancel" in report.next_step
    assert "--tenant acme --yes" in report.next_step
    assert report.sessions == ("s-1", "s-3", "s-old")
    assert world.backends.store.load(TENANT_A, "s-2") is not None  # kept, not forced
    assert world.backends.store.load(TENANT_A, "s-1") is None
    left = {k.decode().split("}")[0].split("/")[1] for k in world.tag_keys(TENANT_A)}
    assert {t for t in left if not t.startswith("~")} == {"s-2", "s-queued"}
    for name in world.tag_keys(TENANT_A):  # the index entries left name kept sessions only
        if b"{acme/~" in name:
            assert world.client.get(name) in (b"s-2", b"s-queued"), name
    assert report.redis_keys_left == len(world.tag_keys(TENANT_A))
    # the kept run is still found by its bare id (its entry in the tenant's run-id index)
    assert world.backends.runs.locate(TENANT_A, queued.run_id) == RunRef(
        TENANT_A, "s-queued", queued.run_id
    )

    assert world.backends.leases.release(lease)
    assert drain(world.runtime, TENANT_A, "s-queued") == 1  # the queued run is done
    view = world.backends.runs.get(RunRef(TENANT_A, "s-queued", queued.run_id))
    assert view is not None and view.result is not None
    again = world.purge()

    assert again.complete and again.sessions == ("s-2", "s-queued")
    assert again.heads == 2
    assert world.tag_keys(TENANT_A) == set()
    assert world.objects(TENANT_A) == {}


class _RacingArchive:
    """The archive, submitting a run on one session while that session is being deleted."""

    def __init__(self, world: World, session_id: str) -> None:
        self._world = world
        self._session_id = session_id
        self.raced: list[RunRequest] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self._world.backends.archive, name)

    def delete_session(self, tenant: str, session_id: str) -> int:
        deleted = int(self._world.backends.archive.delete_session(tenant, session_id))
        if session_id == self._session_id:
            self.raced.append(self._world.submit(tenant, session_id, "5+5"))
        return deleted


def test_a_run_queued_during_the_purge_is_not_swept_away(world: World) -> None:
    """The run waits for the delete's lease; once the delete ends it belongs to a new session,
    so the sweep leaves that session's keys (its queue) alone and reports it."""
    racing = _RacingArchive(world, "s-3")
    archive: EventArchive = racing  # type: ignore[assignment]
    b = world.backends
    report = purge_tenant(b.store, archive, world.client, world.keys, TENANT_A, dry_run=False)

    assert [(s.session_id, s.reason) for s in report.skipped] == [
        ("s-3", "a run was queued on it while the purge ran")
    ]
    assert report.sessions == ("s-1", "s-2", "s-old")
    assert drain(world.runtime, TENANT_A, "s-3") == 1  # the queued run was kept
    head = b.store.load(TENANT_A, "s-3")
    assert head is not None
    memory = head.snapshot.memory.items
    assert [i.content for i in memory if isinstance(i, UserMessage)] == ["5+5"]


def _cli(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    env = stack_env(world.redis_url, world.bucket.endpoint_url, world.bucket.bucket)
    env["TETHER_STORE_URL"] = f"s3://{world.bucket.bucket}/{world.keys.prefix}"
    env["TETHER_NAMESPACE"] = world.keys.prefix
    script = Path(sys.executable).parent / "tether"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "tether.producer.ops.cli"]
    return subprocess.run(
        [*argv, "sessions", "purge", *args],
        env=env,
        cwd=world.workdir,  # no .env or .tether/env of the checkout
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def test_cli_refuses_without_yes_and_exits_1_while_sessions_are_busy(world: World) -> None:
    before = world.namespace_dump(), world.objects()

    refused = _cli(world, "--tenant", TENANT_A)

    assert refused.returncode == 2, refused.stderr
    assert "refusing to purge tenant acme without --yes" in refused.stderr
    assert "would delete 4 sessions, 3 heads" in refused.stdout
    assert (world.namespace_dump(), world.objects()) == before  # nothing deleted

    lease = world.backends.leases.acquire(TENANT_A, "s-2", "busy-worker", 60_000)
    assert lease is not None
    partial = _cli(world, "--tenant", TENANT_A, "--yes", "--json")

    assert partial.returncode == 1, partial.stderr
    report = json.loads(partial.stdout)
    assert report["complete"] is False and report["dry_run"] is False
    assert report["skipped"] == [{"session_id": "s-2", "reason": "running or has queued runs"}]
    assert report["sessions"] == ["s-1", "s-3", "s-old"]

    assert world.backends.leases.release(lease)
    done = _cli(world, "--tenant", TENANT_A, "--yes")

    assert done.returncode == 0, done.stderr
    assert "deleted 1 session, 1 head," in done.stdout
    assert world.tag_keys(TENANT_A) == set() and world.objects(TENANT_A) == {}
    assert world.heads(TENANT_B) and all(world.heads(TENANT_B).values())
