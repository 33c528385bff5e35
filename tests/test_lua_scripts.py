"""The Lua scripts of the Redis protocol: each lives once, as a ``.lua`` file with named KEYS and
ARGV, compiles on a real redis-server, and restates no key name (keys come from ``tether.keys``).
"""

from __future__ import annotations

import re
from importlib import resources

import pytest
import redis

from tether.keys import RedisKeys
from tether.persistence.lua import LuaScript, load

SCRIPTS = sorted(
    p.name.removesuffix(".lua")
    for p in resources.files("tether.persistence.lua").iterdir()
    if p.name.endswith(".lua")
)
#: Suffixes :class:`RedisKeys` puts after a session's hash tag; no script may write one itself.
SESSION_SUFFIXES = (
    "events", "meta", "fence", "lease", "released", "pending", "req:", "run:", "cancel:",
    "attempts:", "archived", "ckpt", "head", "kick",
)  # fmt: skip


def test_every_script_is_found() -> None:
    # the protocol's scripts, by file: a rename or a lost file fails here, not at run time
    assert set(SCRIPTS) >= {
        "submit", "record_rejected", "begin", "hand_back", "cancel", "finish", "finish_release",
        "release_if_idle", "lease_acquire", "lease_renew", "lease_release", "claim",
        "checkpoint_save", "head_put", "stream_append", "purge_sweep",
    }  # fmt: skip


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_compiles_on_redis(name: str, redis_client: redis.Redis) -> None:
    script = load(name)
    sha = redis_client.script_load(script.source)
    assert redis_client.script_exists(sha) == [True]


@pytest.mark.parametrize("name", SCRIPTS)
def test_no_script_restates_a_key_name(name: str) -> None:
    body = (resources.files("tether.persistence.lua") / f"{name}.lua").read_text()
    code = "\n".join(line.split("--", 1)[0] for line in body.splitlines())
    # a key name built in Lua is a literal joined to something ('run:' .. id, prefix .. 'head');
    # a bare literal is a field or a value (an event's 'fence' field is not the fence key)
    joined = re.findall(r"'([^']*)'\s*\.\.|\.\.\s*'([^']*)'", code)
    literals = [a or b for a, b in joined] + re.findall(r"'([^']*:)'", code)
    restated = [lit for lit in literals if lit in SESSION_SUFFIXES or lit.endswith(":")]
    assert restated == [], f"{name}.lua builds key names itself: {restated}"


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_prologue_names_every_declared_key_and_argument(name: str) -> None:
    script = load(name)
    for i, key in enumerate(script.key_names, 1):
        assert f"{key} = KEYS[{i}]" in script.source
    for i, arg in enumerate(script.arg_names, 1):
        assert f"{arg} = ARGV[{i}]" in script.source


def test_calls_are_built_by_name_and_checked() -> None:
    lease = load("lease_renew")
    assert lease.keys(lease="k") == ["k"]
    assert lease.argv(ttl_ms=5, lease_value="v") == ["v", 5]  # declared order, not call order
    with pytest.raises(TypeError, match="missing \\['ttl_ms'\\]"):
        lease.argv(lease_value="v")
    with pytest.raises(TypeError, match="unexpected \\['ttl'\\]"):
        lease.argv(lease_value="v", ttl_ms=5, ttl=1)
    with pytest.raises(TypeError, match="takes no KEYS beyond"):
        lease.keys(["extra"], lease="k")
    sweep: LuaScript = load("purge_sweep")
    assert sweep.keys(["a", "b"], lease="l", pending="p") == ["l", "p", "a", "b"]


def test_the_claim_scripts_prefixes_build_the_same_keys_as_the_schema() -> None:
    k = RedisKeys("ns")
    assert k.run_prefix("t", "s") + "r-1" == k.run("t", "s", "r-1")
    assert k.cancel_prefix("t", "s") + "r-1" == k.cancel("t", "s", "r-1")
    assert k.attempts_prefix("t", "s") + "r-1" == k.attempts("t", "s", "r-1")
