"""The Lua scripts of the Redis protocol: each lives once, as a ``.lua`` file with named KEYS,
ARGV and reply slots, compiles on a real redis-server, restates no key name (keys come from
``tether.keys``), and returns its slots in the order its header declares them.
"""

from __future__ import annotations

import re
from importlib import resources

import pytest
import redis

from tether.keys import RedisKeys
from tether.persistence.lua import LuaScript, load, reply_of
from tether.runs.queue.record import RunField, RunState, record_script

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
    script = record_script(name)
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
    script = record_script(name)
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


LIBS = sorted(
    p.name.removesuffix(".lua")
    for p in resources.files("tether.persistence.lua").joinpath("lib").iterdir()
    if p.name.endswith(".lua")
)
#: A slot that needs no name: a number, a string, a boolean.
_LUA_LITERAL = re.compile(r"-?\d+|'[^']*'|\"[^\"]*\"|true|false")
_LUA_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _code(text: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _table_items(code: str, start: int) -> list[str]:
    """The top-level items of the table constructor whose ``{`` is at ``start``."""
    depth, items, item = 0, [], ""
    for ch in code[start + 1 :]:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            if depth == 0:
                return [*items, item.strip()] if item.strip() else items
            depth -= 1
        if ch == "," and depth == 0:
            items.append(item.strip())
            item = ""
        else:
            item += ch
    raise AssertionError("unbalanced table constructor")


Slots = tuple[str, ...]


def reply_disagreements(text: str, slots: Slots, libs: dict[str, Slots]) -> list[str]:
    """Where a Lua file's returns disagree with its declared reply ``slots``.

    A returned table holds at most the declared slots, and an item that is a name (``fence``,
    ``r.run_id``) named like a slot sits at that slot; numbers, strings and booleans fill any
    slot. Without slots, no table of two or more items is returned. ``return f(...)`` of a
    library function answers with that function's slots, and ``local a, b = unpack(f(...))``
    names them in their order. ``libs``: each library function's slots.
    """
    code, problems = _code(text), []
    for match in re.finditer(r"\breturn\s*\{", code):
        problems += _table_disagreements(_table_items(code, match.end() - 1), slots)
    for match in re.finditer(r"\breturn\s+(\w+)\(", code):
        if match.group(1) in libs and libs[match.group(1)] != slots:
            problems.append(f"returns {match.group(1)}()'s {libs[match.group(1)]}, not {slots}")
    for match in re.finditer(r"\b(\w+(?:\s*,\s*\w+)*)\s*=\s*unpack\((\w+)\(", code):
        names = tuple(n.strip() for n in match.group(1).split(","))
        lib = libs.get(match.group(2))
        if lib is not None and names != lib[: len(names)]:
            problems.append(f"unpacks {match.group(2)}()'s {lib} as {names}")
    return problems


def _table_disagreements(items: list[str], slots: Slots) -> list[str]:
    if not slots:
        many = len(items) > 1
        return [f"returns {{{', '.join(items)}}} but declares no -- @reply"] if many else []
    problems = []
    if len(items) > len(slots):
        problems.append(f"returns {len(items)} items, more than the slots {slots}")
    for i, item in enumerate(items[: len(slots)]):
        if _LUA_LITERAL.fullmatch(item) or not _LUA_NAME.fullmatch(item):
            continue
        named = item.rsplit(".", 1)[-1]
        if named in slots and named != slots[i]:
            problems.append(f"returns {item} in slot {i + 1} ({slots[i]}), not its own")
    return problems


@pytest.mark.parametrize("path", [f"{n}.lua" for n in SCRIPTS] + [f"lib/{n}.lua" for n in LIBS])
def test_each_reply_is_returned_in_its_declared_order(path: str) -> None:
    text = (resources.files("tether.persistence.lua") / path).read_text()
    libs = {lib: reply_of(f"lib/{lib}.lua") for lib in LIBS}
    assert reply_disagreements(text, reply_of(path), libs) == []


def test_the_reply_check_catches_a_disagreement() -> None:
    libs = {"acquire": ("fence", "takeover")}
    slots = ("code", "run_id", "fence")
    assert reply_disagreements("return {code, run_id, fence}", slots, libs) == []
    assert reply_disagreements("return {code, 0, fence}", slots, libs) == []
    assert reply_disagreements("return {run_id, code, fence}", slots, libs) != []
    assert reply_disagreements("return {code, r.fence, 0}", slots, libs) != []
    assert reply_disagreements("return {code, run_id, fence, 1}", slots, libs) != []
    assert reply_disagreements("return {1, 2}", (), libs) != []
    assert reply_disagreements("return acquire(a, b)", slots, libs) != []
    assert reply_disagreements("local takeover, fence = unpack(acquire(a))", slots, libs) != []
    assert reply_disagreements("if x then takeover, fence = unpack(acquire(a)) end", (), libs)
    assert not reply_disagreements("if x then fence, takeover = unpack(acquire(a)) end", (), libs)


def test_the_claim_reply_is_decoded_by_its_declared_names() -> None:
    claim = record_script("claim")
    assert claim.reply_names == (
        "code", "run_id", "fence", "takeover", "head", "record", "checkpoint", "attempts",
        "cancelled", "queued", "cached",
    )  # fmt: skip
    short = claim.reply([None, None, 3, 1])  # held by another, or an empty queue: it stops early
    assert short["fence"] == 3 and short["takeover"] == 1 and short["head"] is None
    with pytest.raises(ValueError, match="more than its slots"):
        claim.reply([0] * 12)
    with pytest.raises(TypeError, match="declares no reply slots"):
        record_script("begin").reply([1])


def test_an_optional_group_is_given_whole_or_not_at_all() -> None:
    claim = record_script("claim")
    assert claim.optional_keys == ("req_index", "run")
    named = {n: n for n in claim.key_names if n not in claim.optional_keys}
    assert claim.keys(**named) == list(named)
    assert claim.keys(**named, req_index="i", run="r") == [*named, "i", "r"]
    with pytest.raises(TypeError, match="missing \\['run'\\]"):
        claim.keys(**named, req_index="i")
    with pytest.raises(TypeError, match="\\[run_id request ttl_s reject"):
        claim.argv()


def test_the_tables_are_prepended_from_the_enums_and_every_read_is_declared() -> None:
    begin = record_script("begin")
    assert begin.source.startswith(
        "local F = {" + ", ".join(f"{f.name} = '{f.value}'" for f in RunField) + "}\n"
        "local S = {" + ", ".join(f"{s.name} = '{s.value}'" for s in RunState) + "}\n"
    )
    assert record_script("begin").source == begin.source  # the same text, so the same SHA
    assert "local S" not in record_script("finish").source  # only the tables a script names
    with pytest.raises(TypeError, match="reads the tables \\['F', 'S'\\]"):
        load("begin")
