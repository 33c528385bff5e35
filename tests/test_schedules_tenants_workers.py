"""#47 SC1: run schedules inside the trust model, on real processes: a beat (the operator's
credential), a worker that runs registered runs only, and one Redis ACL user per tenant (the
trust model's rules plus the broker's keys, as every tenant that submits needs).

Before, a tenant with the documented rules could not use schedules at all; granted the one
missing pattern, team-b read team-a's schedule inputs, added a schedule the beat ran in team-a's
session (the beat registered it with its own credential), and removed team-a's schedule; and an
entry of any other Celery task made the beat publish that task. Now a schedule lives in its
tenant's keyspace, the beat runs it as that tenant (the keyspace, never the body), and refuses,
logs and counts anything that is not a Tether schedule of that tenant.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest
import redis

from tests.support.stack import eventually, unique
from tests.test_tenant_acl import tenant_acl
from tether.core.results import RunStatus
from tether.dev.beat import BeatProcess
from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerProcess
from tether.errors import PermissionDenied
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.producer import Producer
from tether.producer.schedules import Schedules
from tether.producer.schedules.model import parse_schedule
from tether.producer.schedules.presence import list_beats
from tether.producer.schedules.store import encode_definition, encode_meta
from tether.settings import Settings

NS = "sched-acl"
QUEUE = "sched-acl-q"
KEYS = RedisKeys(NS)


@dataclass
class World:
    server: RedisServer
    admin: redis.Redis
    store_url: str
    worker: WorkerProcess
    beat: BeatProcess

    def tenant_url(self, tenant: str) -> str:
        """A tenant's own credential: its keys (the trust model's rules) and the broker's."""
        password = f"pw-{tenant}-secret"
        broker = [f"~{NS}-celery:*", "&*"]
        rules = [*tenant_acl(KEYS, tenant), *broker]
        self.admin.execute_command("ACL", "SETUSER", tenant, "reset", f">{password}", *rules)
        return f"redis://{quote(tenant)}:{quote(password)}@127.0.0.1:{self.server.port}/0"

    def settings(self, tenant: str, url: str | None = None) -> Settings:
        url = url or self.tenant_url(tenant)
        return Settings(
            broker_url=url,
            redis_url=url,
            namespace=NS,
            queue=QUEUE,
            tenant=tenant,
            store_url=self.store_url,
            registered_runs_only=True,
        )

    def operator(self) -> Schedules:
        """The operator's (the namespace-wide credential's) book, acting for team-b."""
        return Schedules(self.settings("team-b", self.server.url))

    def requests(self, tenant: str, session_id: str) -> dict[str, str]:
        """Request id -> run id, from the session's request-id index."""
        prefix = KEYS.request(tenant, session_id, "x")[:-1]
        keys = self.admin.scan_iter(match=prefix + "*")
        return {k.decode()[len(prefix) :]: (self.admin.get(k) or b"").decode() for k in keys}

    def tenant_keys(self, tenant: str) -> dict[bytes, bytes]:
        """Every Redis key of the tenant, dumped."""
        pattern = KEYS.tenant_pattern(tenant)
        return {k: self.admin.dump(k) or b"" for k in self.admin.scan_iter(match=pattern)}

    def refused(self, reason: str) -> int:
        """The live beat's count of entries refused for ``reason``."""
        return sum(b.refused.get(reason, 0) for b in list_beats(self.admin, KEYS))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("sched-acl")
    server = RedisServer(unix_socket=False, password="admin-" + "x" * 24).start()
    admin = redis_from_url(server.url)
    store_url = f"file://{tmp / 'store'}"
    env = {
        "TETHER_BROKER_URL": server.url,
        "TETHER_REDIS_URL": server.url,
        "TETHER_NAMESPACE": NS,
        "TETHER_QUEUE": QUEUE,
        "TETHER_STORE_URL": store_url,
        "TETHER_REGISTERED_RUNS_ONLY": "1",
    }
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}, **env}
    worker = WorkerProcess("w", env, tmp, queue=QUEUE)
    beat = BeatProcess("beat", env, tmp)
    try:
        worker.start(wait=False)
        beat.start(wait=False)
        worker.wait_ready(90)
        beat.wait_ready(90)
        yield World(server, admin, store_url, worker, beat)
    finally:
        beat.stop()
        worker.stop()
        admin.close()
        server.close()


def test_a_tenant_cannot_read_add_change_or_remove_another_tenants_schedules(world: World) -> None:
    session = unique()
    team_a = Schedules(world.settings("team-a"))
    team_b = Schedules(world.settings("team-b"))
    team_a.add("digest", session_id=session, agent="echo", input="A's input", cron="0 7 * * *")
    before = world.tenant_keys("team-a")

    attempts = {
        "list": lambda: team_b.list(tenant="team-a"),
        "get": lambda: team_b.get("digest", tenant="team-a"),
        "add": lambda: team_b.add(
            "steal", session_id=session, agent="echo", every_s=1, tenant="team-a"
        ),
        "pause": lambda: team_b.pause("digest", tenant="team-a"),
        "remove": lambda: team_b.remove("digest", tenant="team-a"),
    }
    for what, attempt in attempts.items():
        with pytest.raises(PermissionDenied, match="credential acting for tenant 'team-a'"):
            attempt()
            pytest.fail(f"team-b's {what} of team-a's schedules went through")
    raw = redis_from_url(world.tenant_url("team-b"))
    entry, index = KEYS.schedule("team-a", "digest"), KEYS.schedules("team-a")
    for command in (
        ("HGETALL", entry),
        ("HSET", entry, "definition", "{}"),
        ("DEL", entry),
        ("ZRANGE", index, 0, -1),
        ("ZADD", index, 0, "steal"),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            raw.execute_command(*command)
    raw.close()
    assert team_b.list() == []  # team-b's own schedules: none of team-a's
    assert [v.schedule.input for v in team_a.list()] == ["A's input"]
    assert world.tenant_keys("team-a") == before  # byte for byte
    team_a.remove("digest")  # its own credential may


def test_a_schedule_runs_in_its_keyspaces_tenant_never_the_one_its_body_names(
    world: World,
) -> None:
    """team-b's schedule on a session id team-a also uses runs in team-b's keyspace (its runs
    are registered there, so the registered-only worker runs them); an entry team-b writes in
    its own keyspace whose body says ``tenant: team-a`` is refused and counted, and nothing of
    team-a's is read or written."""
    session = unique()
    with Producer(world.settings("team-a")) as team_a:
        assert team_a.run(session, "remember A's fact", agent="notes", wait_s=60).ok
        a_keys = world.tenant_keys("team-a")
        team_b = Schedules(world.settings("team-b"))
        team_b.add("tick", session_id=session, agent="echo", input="b-tick", every_s=1)
        forged = parse_schedule(
            name="steal", session_id=session, agent="notes", input="recall", tenant="team-a",
            every_s=1,
        )  # fmt: skip
        raw = redis_from_url(world.tenant_url("team-b"))
        long_ago = datetime.now(UTC) - timedelta(minutes=5)
        raw.hset(
            KEYS.schedule("team-b", "steal"),
            mapping={
                "definition": encode_definition(forged, enabled=True),
                "meta": encode_meta(long_ago),
            },
        )
        raw.zadd(KEYS.schedules("team-b"), {"steal": 0})
        raw.close()

        eventually(lambda: len(world.requests("team-b", session)) >= 2, 60)
        eventually(lambda: world.refused("other_tenant") >= 1, 60)
        team_b.pause("tick")
        with Producer(world.settings("team-b")) as producer:
            for request_id, run_id in world.requests("team-b", session).items():
                assert request_id.startswith("sched:tick:")
                assert producer.handle(run_id).result(timeout=60).status == RunStatus.COMPLETED
        assert not [r for r in world.requests("team-a", session) if r.startswith("sched:")]
        assert world.tenant_keys("team-a") == a_keys  # nothing of team-a's written
        assert team_a.run(session, "recall", agent="notes", wait_s=60).output == "A's fact"
    assert "refused and not run (other_tenant: it names tenant 'team-a')" in world.beat.log_text()
    team_b.remove("tick")
    team_b.remove("steal")


def test_a_forged_entry_of_another_task_is_never_published(world: World) -> None:
    """An entry of another Celery task (a canvas run for team-a, routed to a queue of its own),
    written by team-b in its keyspace and, as the finding had it, where every tenant's entries
    used to be: the beat publishes neither, through many loops, and refuses the first."""
    forged_queue = f"{QUEUE}-forged"
    definition = json.dumps(
        {
            "name": "evil",
            "task": "tether.canvas.run",
            "args": ["s-a", "remember B WAS HERE"],
            "kwargs": {"agent": "notes", "tenant": "team-a"},
            "options": {"queue": forged_queue},
            "schedule": {"__type__": "interval", "every": 1.0, "relative": False},
            "enabled": True,
        }
    )
    meta = encode_meta(datetime.now(UTC) - timedelta(minutes=5))
    raw = redis_from_url(world.tenant_url("team-b"))
    raw.hset(KEYS.schedule("team-b", "evil"), mapping={"definition": definition, "meta": meta})
    raw.zadd(KEYS.schedules("team-b"), {"evil": 0})
    raw.close()
    legacy_entry = KEYS.beat_prefix() + "evil"
    world.admin.hset(legacy_entry, mapping={"definition": definition, "meta": meta})
    world.admin.zadd(KEYS.legacy_schedules(), {legacy_entry: 0})

    session = unique()
    operator = world.operator()
    operator.add("pulse", session_id=session, agent="echo", input="p", every_s=1)
    eventually(lambda: world.refused("not_a_schedule") >= 1, 60)
    fired = len(world.requests("team-b", session))
    eventually(lambda: len(world.requests("team-b", session)) >= fired + 3, 60)  # more loops
    assert list(world.admin.scan_iter(match=f"{NS}-celery:{forged_queue}*")) == []
    log = world.beat.log_text()
    assert "refused and not run (not_a_schedule: it names task 'tether.canvas.run')" in log
    assert "1 schedule(s) are stored in the layout of before tenants owned" in log
    assert log.count("schedule evil of tenant team-b is refused") == 1  # logged once
    operator.remove("pulse")
    operator.remove("evil")
