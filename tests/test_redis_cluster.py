"""A real 3-master Redis Cluster: the launcher, ``redis+cluster://`` URLs, error translation, and
where the session-scoped keys land. The lease, stream and checkpoint contracts also run on the
cluster (their ``cluster`` parameter); this file covers what those contracts cannot see."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from tether.core.events import AgentEvent, EventType, TextPayload
from tether.dev.redis_cluster import RedisClusterProcesses, find_redis_cli_binary
from tether.dev.redis_server import RedisServer
from tether.errors import ConfigurationError, SettingsError, StreamUnavailable, TetherError
from tether.keys import RedisKeys
from tether.persistence.redis_conn import (
    DEFAULT_SOCKET_TIMEOUT_S,
    describe_client,
    max_block_ms,
    redact_url,
    redis_from_url,
    socket_timeout_s,
    translate_errors,
)
from tether.persistence.streams import RedisEventStream
from tether.runs.leases import RedisLeaseManager
from tether.settings import load_settings
from tether.worker.engine.checkpoints.base import Checkpoint
from tether.worker.engine.checkpoints.redis import RedisCheckpointStore

PASSWORD = "cl:us/ter@pw%1"
ENCODED = quote(PASSWORD, safe="")
#: The sessions the contract tests use (tenant, session id), plus a few more.
SESSIONS = [("acme", "s-1"), ("acme", "s-2"), ("other", "s-1"), ("t", "s"), ("t", "other")]
SESSIONS += [("acme", f"spread-{i}") for i in range(6)]


def ev(seq: int, tenant: str, session: str) -> AgentEvent:
    return AgentEvent(
        type=EventType.STEP_START,
        tenant=tenant,
        session_id=session,
        seq=seq,
        payload=TextPayload(text=f"e{seq}"),
    )


@pytest.fixture
def cluster_client(cluster_url: str) -> Iterator[redis.Redis]:
    client = redis_from_url(cluster_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def pw_cluster(redis_binary: str) -> Iterator[RedisClusterProcesses]:
    """A cluster of its own with a password, which the tests may also kill nodes of."""
    with RedisClusterProcesses(binary=redis_binary, password=PASSWORD, node_timeout_ms=1000) as c:
        yield c


def _slot_owners(cluster: RedisClusterProcesses) -> dict[int, int]:
    """Slot -> index of the node that serves it, from CLUSTER SLOTS of node 0."""
    probe = cluster.node_client(0)
    try:
        ranges = probe.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
    finally:
        probe.close()
    owners: dict[int, int] = {}
    for first, last, master, *replicas in ranges:
        assert replicas == []
        index = cluster.ports.index(int(master[1]))
        owners.update(dict.fromkeys(range(int(first), int(last) + 1), index))
    return owners


def test_launcher_builds_three_masters_covering_every_slot(
    redis_cluster: RedisClusterProcesses,
) -> None:
    assert len(redis_cluster.nodes) == 3 and len(set(redis_cluster.ports)) == 3
    for index in range(3):
        info = redis_cluster.cluster_info(index)
        assert info["cluster_state"] == "ok"
        assert info["cluster_slots_assigned"] == info["cluster_slots_ok"] == "16384"
        assert info["cluster_known_nodes"] == info["cluster_size"] == "3"
    owners = _slot_owners(redis_cluster)
    assert sorted(owners) == list(range(16384))
    assert set(owners.values()) == {0, 1, 2}
    assert redis_cluster.url == "redis+cluster://" + ",".join(
        f"127.0.0.1:{p}" for p in redis_cluster.ports
    )
    # Each node runs in a session of its own: signals to our terminal do not reach it.
    for node in redis_cluster.nodes:
        assert node.pid is not None and os.getsid(node.pid) == node.pid


def test_cluster_url_gives_a_working_cluster_client(
    cluster_client: redis.Redis, redis_cluster: RedisClusterProcesses
) -> None:
    inner: object = cluster_client  # typed redis.Redis by redis_from_url, see its docstring
    assert isinstance(inner, RedisCluster)
    assert describe_client(cluster_client) == redis_cluster.url
    assert socket_timeout_s(cluster_client) == DEFAULT_SOCKET_TIMEOUT_S
    assert max_block_ms(cluster_client) == int(DEFAULT_SOCKET_TIMEOUT_S * 1000) - 1000
    # Keys of several slots, on several masters, through one client; bytes come back.
    for i in range(20):
        cluster_client.set(f"k{i}", i)
    assert [cluster_client.get(f"k{i}") for i in range(20)] == [str(i).encode() for i in range(20)]
    owners = _slot_owners(redis_cluster)
    assert {owners[key_slot(f"k{i}".encode())] for i in range(20)} == {0, 1, 2}
    # One URL naming a single node is enough: the client learns the others.
    one = redis_from_url(f"redis+cluster://127.0.0.1:{redis_cluster.ports[1]}", retry=None)
    try:
        assert one.get("k7") == b"7"
    finally:
        one.close()


def test_session_keys_share_a_slot_and_spread_over_masters(
    cluster_client: redis.Redis, redis_cluster: RedisClusterProcesses
) -> None:
    keys = RedisKeys("tether-test")
    leases = RedisLeaseManager(cluster_client, keys=keys)
    stream = RedisEventStream(cluster_client, keys=keys)
    checkpoints = RedisCheckpointStore(cluster_client, keys, ttl_s=60)
    for tenant, session in SESSIONS:
        lease = leases.acquire(tenant, session, "w", 10_000)
        assert lease is not None
        stream.append(tenant, session, [ev(1, tenant, session)], lease.fence)
        checkpoints.save(
            tenant, session, Checkpoint(run_id="r1", fence=lease.fence, base_seq=0, last_seq=1)
        )
        assert leases.release(lease)
    # Where the keys physically are: ask every node for its own keys.
    where: dict[str, int] = {}
    for index in range(3):
        node = redis_cluster.node_client(index)
        try:
            where.update({k.decode(): index for k in node.scan_iter(match="tether-test:*")})
        finally:
            node.close()
    session_nodes = set()
    for tenant, session in SESSIONS:
        tag = keys.session_tag(tenant, session)
        mine = {k: n for k, n in where.items() if tag in k}
        # events, meta, fence, released, ckpt (the lease was released)
        assert len(mine) == 5, mine
        assert len(set(mine.values())) == 1, f"keys of {tag} on several nodes: {mine}"
        session_nodes |= set(mine.values())
    assert len(session_nodes) >= 2, f"all sessions landed on node {session_nodes}"
    # The contract tests' own sessions alone already use two masters.
    assert len({where[keys.fence(t, s)] for t, s in SESSIONS[:5]}) >= 2


def test_keys_of_one_script_in_different_slots_is_reported_as_a_bug(
    cluster_client: redis.Redis,
) -> None:
    where = describe_client(cluster_client)
    two_slots = cluster_client.register_script("return redis.call('MSET', KEYS[1], 1, KEYS[2], 2)")
    # redis-py refuses before sending: the declared keys hash to different slots.
    with pytest.raises(TetherError, match="report it") as client_side, translate_errors(where):
        two_slots(keys=["{a}x", "{b}x"])
    assert type(client_side.value) is TetherError and not client_side.value.retryable
    assert "different hash slots" in str(client_side.value)
    # The server refuses: the script touches a key it did not declare, of another slot.
    undeclared = cluster_client.register_script(
        "redis.call('SET', KEYS[1], 1); return redis.call('SET', '{zz-other}x', 1)"
    )
    with pytest.raises(TetherError, match="report it") as server_side, translate_errors(where):
        undeclared(keys=["{a}x"])
    assert type(server_side.value) is TetherError
    # An ordinary script error is not mistaken for a cluster problem.
    broken = cluster_client.register_script("return redis.call('NOSUCHCOMMAND', KEYS[1])")
    with pytest.raises(redis.exceptions.ResponseError), translate_errors(where):
        broken(keys=["{a}x"])


def test_wrong_kind_of_url_says_which_to_use(
    redis_cluster: RedisClusterProcesses, redis_server: RedisServer
) -> None:
    # A single-node client on a cluster node: MOVED for keys of the other nodes.
    plain = redis_cluster.node_client(0)
    try:
        where = describe_client(plain)
        with pytest.raises(ConfigurationError, match=r"redis\+cluster://"), translate_errors(where):
            for i in range(50):
                plain.get(f"k{i}")
    finally:
        plain.close()
    # A cluster URL on a single Redis.
    assert redis_server.port is not None
    with pytest.raises(ConfigurationError, match="not a cluster"):
        redis_from_url(f"redis+cluster://127.0.0.1:{redis_server.port}")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis+cluster://:pw@h1:7000,h2:7001", "redis+cluster://:***@h1:7000,h2:7001"),
        ("rediss+cluster://u:pw@h1:7000/0", "rediss+cluster://u:***@h1:7000/0"),
        ("redis+cluster://h1:7000,h2:7001", "redis+cluster://h1:7000,h2:7001"),
    ],
)
def test_cluster_urls_are_redacted(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_missing_redis_cli_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigurationError, match="apt-get install redis-tools"):
        find_redis_cli_binary(str(tmp_path / "redis-server"))
    beside = tmp_path / "redis-cli"
    beside.write_text("#!/bin/sh\n")
    beside.chmod(0o700)
    assert find_redis_cli_binary(str(tmp_path / "redis-server")) == str(beside)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+cluster://", "bad node"),
        ("redis+cluster://127.0.0.1:7000,", "bad node"),
        ("redis+cluster://:pw@127.0.0.1:x", "bad node"),
        ("redis+cluster://127.0.0.1:7000/3", "database"),
        ("redis+clusterx://127.0.0.1:7000", r"redis\+cluster://host:port"),
    ],
)
def test_bad_cluster_urls_are_configuration_errors(url: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem) as err:
        redis_from_url(url)
    assert ":pw@" not in str(err.value)


def test_settings_accept_a_cluster_url_for_redis_but_not_for_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    url = f"redis+cluster://:{ENCODED}@10.0.0.1:7000,10.0.0.2:7000"
    settings = load_settings(redis_url=url, broker_url="amqp://guest@h//")
    assert settings.effective_redis_url == url
    with pytest.raises(SettingsError, match="TETHER_BROKER_URL") as broker:
        load_settings(broker_url=url)
    assert ENCODED not in str(broker.value)
    assert "Celery cannot use a Redis Cluster as its broker" in str(broker.value)
    with pytest.raises(SettingsError, match="node 'h:x'") as bad:
        load_settings(redis_url="redis+cluster://:pw@h:1,h:x")
    assert ":pw@" not in str(bad.value)


def test_password_is_required_and_never_shown(pw_cluster: RedisClusterProcesses) -> None:
    url = pw_cluster.url
    assert ENCODED in url
    assert ENCODED not in repr(pw_cluster) and ENCODED not in redact_url(url)
    client = redis_from_url(url)
    try:
        assert client.set("k", b"v") and client.get("k") == b"v"
        assert ENCODED not in describe_client(client)
        assert describe_client(client).startswith("redis+cluster://127.0.0.1:")
    finally:
        client.close()
    anonymous = url.replace(url[len("redis+cluster://") : url.index("@") + 1], "")
    wrong = url.replace(url[len("redis+cluster://") : url.index("@")], ":wrong-pw")
    for bad in (anonymous, wrong):
        with pytest.raises(ConfigurationError, match="credentials") as refused:
            redis_from_url(bad, retry=None)
        assert ENCODED not in str(refused.value) and "wrong-pw" not in str(refused.value)


def test_rediss_cluster_url_speaks_tls() -> None:
    """The first bytes a ``rediss+cluster://`` client sends are a TLS handshake record."""
    first_bytes: list[bytes] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def accept_one() -> None:
            conn, _ = listener.accept()
            with conn:
                first_bytes.append(conn.recv(1))

        sniffer = threading.Thread(target=accept_one, daemon=True)
        sniffer.start()
        url = f"rediss+cluster://:{ENCODED}@127.0.0.1:{port}"
        with pytest.raises(StreamUnavailable) as refused:
            redis_from_url(url, retry=None, socket_connect_timeout=5.0, socket_timeout=5.0)
        sniffer.join(timeout=5.0)
    assert first_bytes == [b"\x16"]  # TLS record type 22: handshake (plain Redis sends b"*")
    assert "rediss+cluster://:***@" in str(refused.value) and ENCODED not in str(refused.value)


def test_a_killed_master_makes_its_sessions_unavailable_until_restarted(
    pw_cluster: RedisClusterProcesses,
) -> None:
    client = redis_from_url(pw_cluster.url, socket_connect_timeout=1.0)
    keys = RedisKeys("kill")
    leases = RedisLeaseManager(client, keys=keys)
    try:
        owners = _slot_owners(pw_cluster)
        victims = (f"victim-{i}" for i in range(100))
        victim = next(s for s in victims if owners[key_slot(keys.fence("t", s).encode())] == 2)
        assert leases.acquire("t", victim, "w", 60_000) is not None
        pw_cluster.kill_node(2)
        with pytest.raises(StreamUnavailable) as down:
            leases.acquire("t", victim, "w2", 60_000)
        assert down.value.retryable and ENCODED not in str(down.value)
        pw_cluster.restart_node(2)
        # The node is back with its slots and without its data (no persistence).
        lease = leases.acquire("t", victim, "w2", 60_000)
        assert lease is not None and lease.fence == 1
    finally:
        client.close()
