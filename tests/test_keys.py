"""The Redis key schema (layout v2): slots, isolation and validation."""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

import pytest
import redis
from redis.crc import key_slot

from tether.errors import ConfigurationError, InvalidId
from tether.keys import (
    ACTIVE_SHARDS,
    DEFAULT_PREFIX,
    DONE_SHARDS,
    FEED_SHARDS,
    QUEUED_SHARDS,
    RUN_INDEX_SHARDS,
    USAGE_SHARDS,
    RedisKeys,
)

#: Enough run ids that every run-index shard is used (crc32 spreads them evenly).
MANY_RUNS = 500


def slot(key: str) -> int:
    return int(key_slot(key.encode()))


def hash_tag(key: str) -> str:
    """The part of ``key`` Redis Cluster hashes: the first ``{...}`` (every key here has one)."""
    found = re.search(r"\{([^}]+)\}", key)
    assert found is not None, f"{key!r} has no hash tag"
    return found.group(1)


def session_and_run_keys(keys: RedisKeys, tenant: str, session: str, run: str) -> list[str]:
    """Every key of one session and of one of its runs."""
    return [
        keys.events(tenant, session),
        keys.stream_meta(tenant, session),
        keys.fence(tenant, session),
        keys.lease(tenant, session),
        keys.released(tenant, session),
        keys.pending(tenant, session),
        keys.request(tenant, session, "req-1"),
        keys.run(tenant, session, run),
        keys.cancel(tenant, session, run),
        keys.attempts(tenant, session, run),
        keys.archived(tenant, session),
        keys.checkpoints(tenant, session),
        keys.kick(tenant, session),
    ]


def tenant_keys(keys: RedisKeys, tenant: str) -> list[str]:
    """Every key a tenant owns: sessions, runs and the run index (over all its shards)."""
    out: list[str] = []
    for session in ("s-1", "s:2", "a.b_c-d"):
        out += session_and_run_keys(keys, tenant, session, "run-1")
    out += [keys.run_index(tenant, f"run-{n}") for n in range(MANY_RUNS)]
    out += [keys.tenant_queued_shard(tenant, n) for n in range(QUEUED_SHARDS)]
    return out


def usage_keys(keys: RedisKeys, tenant: str) -> list[str]:
    """The keys of a tenant's usage: outside its own pattern, read-only for it (#47): layout
    v2's one shard and its rate, and every shard of v2.1 (#51)."""
    out = [*keys.tenant_usage(tenant, "20261130"), keys.tenant_inflight(tenant, "20261130")]
    for shard in range(USAGE_SHARDS):
        out += keys.usage_shard(tenant, "20261130", shard)
    return out


def test_schema_shape() -> None:
    # A change here is a migration: deployed workers and stored sessions use these names.
    keys = RedisKeys()
    assert keys.prefix == DEFAULT_PREFIX == "tether"
    assert keys.events("acme", "s-1") == "tether:{acme/s-1}:events"
    assert keys.stream_meta("acme", "s-1") == "tether:{acme/s-1}:meta"
    assert keys.fence("acme", "s-1") == "tether:{acme/s-1}:fence"
    assert keys.lease("acme", "s-1") == "tether:{acme/s-1}:lease"
    assert keys.released("acme", "s-1") == "tether:{acme/s-1}:released"
    assert keys.pending("acme", "s-1") == "tether:{acme/s-1}:pending"
    assert keys.request("acme", "s-1", "r-9") == "tether:{acme/s-1}:req:r-9"
    assert keys.run("acme", "s-1", "run-1") == "tether:{acme/s-1}:run:run-1"
    assert keys.cancel("acme", "s-1", "run-1") == "tether:{acme/s-1}:cancel:run-1"
    assert keys.attempts("acme", "s-1", "run-1") == "tether:{acme/s-1}:attempts:run-1"
    assert keys.archived("acme", "s-1") == "tether:{acme/s-1}:archived"
    assert keys.checkpoints("acme", "s-1") == "tether:{acme/s-1}:ckpt"
    assert keys.kick("acme", "s-1") == "tether:{acme/s-1}:kick"
    assert keys.run_index("acme", "run-1") == "tether:{acme/~runs:3}:run-1"  # crc32 % 16 == 3
    assert keys.tenant_pattern("acme") == "tether:{acme/*"
    assert keys.tenant_usage("acme", "20261130") == (
        "tether:{~usage/acme}:20261130",
        "tether:{~usage/acme}:20261130:runs",
        "tether:{~usage/acme}:rate",
    )
    assert keys.tenant_inflight("acme", "20261130") == "tether:{~usage/acme}:20261130:inflight"
    assert keys.done(0) == "tether:{~done:0}"
    assert keys.legacy_done() == "tether:{~done}"
    assert keys.producer_done("acme/p-1", 3) == "tether:{~p:acme/p-1:3}:done"
    assert keys.active("acme", "s-1") == "tether:{~active:57}"  # crc32("acme/s-1") % 64 == 57
    assert keys.active_shard(0) == "tether:{~active:0}"
    assert keys.active_member("acme", "s-1") == "acme/s-1"


@pytest.mark.parametrize(
    "tenant, session, run",
    [("acme", "s-1", "run-1"), ("t", "a:b.c_d-e", "r:1"), ("x" * 128, "y" * 128, "z" * 128)],
)
def test_every_key_of_a_session_and_its_runs_shares_one_cluster_slot(
    tenant: str, session: str, run: str
) -> None:
    keys = RedisKeys("ns")
    names = session_and_run_keys(keys, tenant, session, run)
    assert len(set(names)) == len(names)
    assert {slot(k) for k in names} == {slot(keys.session_tag(tenant, session))}
    assert set(keys.session(tenant, session)) <= set(names)


@pytest.mark.parametrize("tenant", ["acme", "a:b", "x" * 128])
def test_a_tenants_usage_keys_and_its_in_flight_record_share_one_slot(tenant: str) -> None:
    # usage_add.lua moves a finished run from the in-flight record into the day atomically:
    # one script, so one slot (the tenant's, under its ACL pattern: no other tenant writes it)
    # (#47: outside the tenant's pattern, so its credential cannot write them; its read-only
    # usage pattern matches them, and no other tenant's does)
    keys = RedisKeys("ns")
    names = [*usage_keys(keys, tenant), keys.tenant_rate_taken(tenant, "run-1")]
    assert len(set(names)) == len(names)
    for shard in range(USAGE_SHARDS):  # each shard's three keys in one slot (#51)
        assert len({slot(k) for k in keys.usage_shard(tenant, "20261130", shard)}) == 1
    legacy = [*keys.tenant_usage(tenant, "20261130"), keys.tenant_rate_taken(tenant, "run-1")]
    assert len({slot(k) for k in legacy}) == 1
    assert not any(fnmatchcase(k, keys.tenant_pattern(tenant)) for k in names)
    assert all(fnmatchcase(k, keys.tenant_usage_pattern(tenant)) for k in names)
    assert not any(fnmatchcase(k, keys.tenant_usage_pattern("other")) for k in names)


def test_runs_of_one_session_share_its_slot_and_differ_by_id() -> None:
    keys = RedisKeys()
    runs = ["run-1", "run-2", "r:1"]
    records = [keys.run("acme", "s-1", run) for run in runs]
    assert len(set(records)) == len(runs)
    assert {slot(k) for k in records} == {slot(keys.events("acme", "s-1"))}
    # The same run id in another session or tenant is another run, with other keys.
    assert keys.run("acme", "s-1", "run-1") != keys.run("acme", "s-2", "run-1")
    assert keys.run("acme", "s-1", "run-1") != keys.run("other", "s-1", "run-1")
    assert keys.cancel("acme", "s-1", "run-1") != keys.cancel("acme", "s-2", "run-1")


def test_run_index_of_one_tenant_spreads_over_its_shards() -> None:
    keys = RedisKeys()
    index = [keys.run_index("acme", f"run-{n}") for n in range(MANY_RUNS)]
    tags = {hash_tag(k) for k in index}
    assert tags == {f"acme/~runs:{n}" for n in range(RUN_INDEX_SHARDS)}
    # '~' is refused in ids, so no session is named like an index shard (nor shares its keys).
    with pytest.raises(InvalidId):
        keys.session_tag("acme", "~runs:0")
    # One run id always lands on the same shard; another tenant's entry is another key.
    assert keys.run_index("acme", "run-7") == index[7]
    assert keys.run_index("other", "run-7") != index[7]


@pytest.mark.parametrize("tenant", ["a", "acme", "a.b", "t:1"])
def test_tenant_pattern_matches_every_key_of_the_tenant(tenant: str) -> None:
    keys = RedisKeys()
    pattern = keys.tenant_pattern(tenant)
    mine = tenant_keys(keys, tenant)
    unmatched = [k for k in mine if not fnmatchcase(k, pattern)]
    assert unmatched == []


@pytest.mark.parametrize("neighbour", ["ab", "a:b", "a-b", "a.b", "a_", "ba", "A"])
def test_tenant_pattern_matches_no_key_of_a_tenant_whose_name_extends_it(neighbour: str) -> None:
    keys = RedisKeys()
    pattern = keys.tenant_pattern("a")
    leaked = [k for k in tenant_keys(keys, neighbour) if fnmatchcase(k, pattern)]
    assert leaked == []
    # Nor the other way round.
    assert not any(fnmatchcase(k, keys.tenant_pattern(neighbour)) for k in tenant_keys(keys, "a"))


def test_tenant_pattern_matches_no_shared_key_and_no_other_namespace() -> None:
    keys = RedisKeys()
    pattern = keys.tenant_pattern("acme")
    shared = [*map(keys.done, range(DONE_SHARDS)), *keys.active_shards(), keys.worker("acme")]
    shared += [keys.workers()]
    shared += [keys.tenants(), *usage_keys(keys, "acme")]
    assert not any(fnmatchcase(k, pattern) for k in shared)
    assert not any(fnmatchcase(k, pattern) for k in tenant_keys(RedisKeys("tether2"), "acme"))
    assert not any(fnmatchcase(k, pattern) for k in tenant_keys(RedisKeys("tethe"), "acme"))


def test_tenant_pattern_finds_exactly_the_tenant_with_redis_scan(
    redis_client: redis.Redis,
) -> None:
    # fnmatch is a stand-in; Redis' own glob decides what SCAN and ACL patterns match.
    keys = RedisKeys("tether-test")
    tenants = ["a", "ab", "a:b", "a-b"]
    owned = {tenant: set(tenant_keys(keys, tenant)) for tenant in tenants}
    pipe = redis_client.pipeline(transaction=False)
    for names in owned.values():
        for name in names:
            pipe.set(name, b"1")
    for name in [keys.done(0), *keys.active_shards(), keys.workers()]:
        pipe.set(name, b"1")
    pipe.execute()
    for tenant in tenants:
        found = {
            k.decode()
            for k in redis_client.scan_iter(match=keys.tenant_pattern(tenant), count=1000)
        }
        assert found == owned[tenant], tenant


def test_active_index_shards_are_distinct_keys_in_distinct_slots() -> None:
    keys = RedisKeys()
    shards = keys.active_shards()
    assert len(set(shards)) == ACTIVE_SHARDS
    # The shards' tags ~active:0..63 happen to hash to 64 different slots (CRC16 is fixed, so
    # this never changes): spreading the index over the shards spreads it over the cluster.
    assert len({slot(k) for k in shards}) == ACTIVE_SHARDS
    # The slot depends only on the tag, never on the namespace.
    assert [slot(k) for k in RedisKeys("ns").active_shards()] == [slot(k) for k in shards]


def test_every_session_is_in_exactly_one_active_shard() -> None:
    keys = RedisKeys()
    shards = keys.active_shards()
    used = {keys.active("acme", f"s-{n}") for n in range(MANY_RUNS)}
    assert used == set(shards)  # the sessions spread over every shard
    with pytest.raises(ValueError, match="out of range"):
        keys.active_shard(ACTIVE_SHARDS)
    with pytest.raises(ValueError, match="out of range"):
        keys.active_shard(-1)


def test_the_completion_feeds_shards_are_in_distinct_slots_by_session() -> None:
    keys = RedisKeys()
    done = [keys.done(n) for n in range(DONE_SHARDS)]
    assert [slot(k) for k in done] == [slot(RedisKeys("other").done(n)) for n in range(DONE_SHARDS)]
    assert len({slot(k) for k in done}) == DONE_SHARDS
    assert not {slot(k) for k in done} & {slot(k) for k in keys.active_shards()}
    feed = keys.feed("acme", "p-1")
    mine = [keys.producer_done(feed, n) for n in range(FEED_SHARDS)]
    assert len({slot(k) for k in mine}) == FEED_SHARDS
    # a session's completions always go to the same shard; sessions spread over all of them
    shards = {keys.feed_shard_of(feed, "acme", f"s-{n}") for n in range(MANY_RUNS)}
    assert shards == set(range(FEED_SHARDS))
    assert keys.feed_shard_of(None, "acme", "s-1") == keys.feed_shard_of(None, "acme", "s-1")
    with pytest.raises(ValueError, match="out of range"):
        keys.done(DONE_SHARDS)
    with pytest.raises(ValueError, match="out of range"):
        keys.producer_done(feed, FEED_SHARDS)


def test_sessions_tenants_and_namespaces_never_collide() -> None:
    a, b = RedisKeys("a"), RedisKeys("b")
    names = {
        a.events("t1", "s"),
        a.events("t2", "s"),
        a.events("t1", "s2"),
        a.events("a:b", "c"),
        a.events("a", "b:c"),
        b.events("t1", "s"),
    }
    assert len(names) == 6
    assert a.run("t", "s", "done") != a.done(0)
    namespaced = (
        a.done(0),
        *a.active_shards(),
        a.run("t", "s", "x"),
        a.run_index("t", "x"),
        a.lease("t", "s"),
    )
    assert all(k.startswith("a:") for k in namespaced)


@pytest.mark.parametrize("bad", ["", "a/b", "a{b", "a}b", "a b", "../x", "é", "x" * 129, "a~b"])
def test_invalid_ids_are_refused(bad: str) -> None:
    keys = RedisKeys()
    with pytest.raises(InvalidId):
        keys.events(bad, "s")
    with pytest.raises(InvalidId):
        keys.lease("t", bad)
    with pytest.raises(InvalidId):
        keys.request("t", "s", bad)
    for build in (keys.run, keys.cancel, keys.attempts):
        with pytest.raises(InvalidId):
            build("t", "s", bad)
        with pytest.raises(InvalidId):
            build("t", bad, "run-1")
        with pytest.raises(InvalidId):
            build(bad, "s", "run-1")
    with pytest.raises(InvalidId):
        keys.run_index("t", bad)
    with pytest.raises(InvalidId):
        keys.run_index(bad, "run-1")
    with pytest.raises(InvalidId):
        keys.tenant_pattern(bad)
    with pytest.raises(InvalidId):
        keys.active(bad, "s")


@pytest.mark.parametrize("bad", ["", "a:b", "a{b}", "a b", "x" * 65])
def test_invalid_prefix_is_refused(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="prefix"):
        RedisKeys(bad)
