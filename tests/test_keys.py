"""The Redis key schema: slots, isolation and validation."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from tether.errors import ConfigurationError, InvalidId
from tether.keys import DEFAULT_PREFIX, RedisKeys


def slot(key: str) -> int:
    return int(key_slot(key.encode()))


def test_schema_shape() -> None:
    keys = RedisKeys()
    assert keys.prefix == DEFAULT_PREFIX == "tether"
    assert keys.events("acme", "s-1") == "tether:{acme/s-1}:events"
    assert keys.stream_meta("acme", "s-1") == "tether:{acme/s-1}:meta"
    assert keys.fence("acme", "s-1") == "tether:{acme/s-1}:fence"
    assert keys.lease("acme", "s-1") == "tether:{acme/s-1}:lease"
    assert keys.pending("acme", "s-1") == "tether:{acme/s-1}:pending"
    assert keys.request("acme", "s-1", "r-9") == "tether:{acme/s-1}:req:r-9"
    assert keys.run("run-1") == "tether:run:{run-1}"
    assert keys.cancel("run-1") == "tether:cancel:{run-1}"
    assert keys.attempts("run-1") == "tether:attempts:{run-1}"
    assert keys.done() == "tether:done"
    assert keys.active() == "tether:active"
    assert keys.active_member("acme", "s-1") == "acme/s-1"


def test_session_keys_share_one_cluster_slot() -> None:
    keys = RedisKeys("ns")
    for tenant, session in [("acme", "s-1"), ("t", "a:b.c_d-e"), ("x" * 128, "y" * 128)]:
        names = [*keys.session(tenant, session), keys.request(tenant, session, "req-1")]
        assert len(set(names)) == len(names)
        assert {slot(k) for k in names} == {slot(keys.session_tag(tenant, session))}


def test_run_keys_share_one_slot() -> None:
    keys = RedisKeys()
    run_keys = [keys.run("r:1"), keys.cancel("r:1"), keys.attempts("r:1")]
    assert len({slot(k) for k in run_keys}) == 1


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
    assert a.run("done") != a.done()
    assert all(k.startswith("a:") for k in (a.done(), a.active(), a.run("x"), a.lease("t", "s")))


@pytest.mark.parametrize("bad", ["", "a/b", "a{b", "a}b", "a b", "../x", "é", "x" * 129])
def test_invalid_ids_are_refused(bad: str) -> None:
    keys = RedisKeys()
    with pytest.raises(InvalidId):
        keys.events(bad, "s")
    with pytest.raises(InvalidId):
        keys.lease("t", bad)
    with pytest.raises(InvalidId):
        keys.request("t", "s", bad)
    with pytest.raises(InvalidId):
        keys.run(bad)


@pytest.mark.parametrize("bad", ["", "a:b", "a{b}", "a b", "x" * 65])
def test_invalid_prefix_is_refused(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="prefix"):
        RedisKeys(bad)
