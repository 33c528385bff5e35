"""The run record's field names have one home, :mod:`tether.runs.queue.record`: no other module
of the package spells one as a literal where it touches a run record.

Field names are also common words (``status``, ``request``, ``tenant``...) used for other things,
so the Python check looks only where a literal reaches a Redis hash: an argument of a hash
command (``hget``, ``hset``, ``hmget``...), a key of a dict that a module passes to one, or a key
read (``.get(...)``, ``[...]``, ``in``) from what one returned or from a ``dict[bytes, bytes]``
(a hash as read). The Lua check is plainer: the scripts read the names from the ``F`` table the
loader prepends, so no string literal in a ``.lua`` file may be a field name or a state.

Run as a program, it lists what it finds under a tree (``python tests/test_run_record_fields.py
ROOT``): the count before and after issue 46 is this program on both commits.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.persistence.lua import load
from tether.runs.queue.base import RunView
from tether.runs.queue.record import FeedField, RunField, RunState, record_script

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("shared", "producer", "worker")
HOME = Path("shared/runs/queue/record.py")
FIELDS = frozenset(f.value for f in RunField)
STATES = frozenset(s.value for s in RunState)
#: Redis hash commands (redis-py method names): their arguments name a hash's fields.
HASH_COMMANDS = frozenset(
    {"hget", "hmget", "hset", "hsetnx", "hdel", "hincrby", "hincrbyfloat", "hexists", "hstrlen"}
)
#: The ones whose answer is a record's fields or values.
HASH_READS = frozenset({"hget", "hmget", "hgetall"})
#: An annotation that says "a hash as read" (bytes field to bytes value).
HASH_ANNOTATION = re.compile(r"(dict|Mapping)\[bytes, bytes\]")


@dataclasses.dataclass(frozen=True)
class Hit:
    """A run-record name written as a literal."""

    path: str
    line: int
    value: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.value!r}"


def _literal(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
        value = node.value
        return value.decode(errors="replace") if isinstance(value, bytes) else value
    return None


def _field_literals(node: ast.AST) -> Iterator[tuple[int, str]]:
    for sub in ast.walk(node):
        value = _literal(sub)
        if value in FIELDS:
            yield sub.lineno, value


def _hash_calls(tree: ast.AST, commands: frozenset[str]) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in commands
        ):
            yield node


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _passed_names(call: ast.Call) -> set[str]:
    """The names handed to ``call`` as they are (``mapping=m``, ``*fields``), not used in an
    argument's expression (``dead.id``)."""
    args = [a.value if isinstance(a, ast.Starred) else a for a in call.args]
    values = [*args, *(k.value for k in call.keywords)]
    return {a.id for a in values if isinstance(a, ast.Name)}


def _assignments(tree: ast.AST) -> Iterator[tuple[list[ast.expr], ast.expr]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            yield node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            yield [node.target], node.value


def _read_names(tree: ast.AST) -> set[str]:
    """Names holding what a hash read returned, or something built from it (a fixpoint)."""
    names = {
        a.arg
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
        for a in [*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs]
        if a.annotation is not None and HASH_ANNOTATION.search(ast.unparse(a.annotation))
    }
    assigned = list(_assignments(tree))
    while True:
        more = set(names)
        for targets, value in assigned:
            reads = any(True for _ in _hash_calls(value, HASH_READS))
            if reads or _names_in(value) & names:
                more |= {n for t in targets for n in _names_in(t)}
        if more == names:
            return names
        names = more


def _keyed_reads(tree: ast.AST, holders: set[str]) -> Iterator[tuple[int, str]]:
    """Field literals used as keys of ``holders``: ``h.get(LIT)``, ``h[LIT]``, ``LIT in h``."""
    for node in ast.walk(tree):
        key: ast.AST | None = None
        holder: ast.AST | None = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in ("get", "pop", "setdefault"):
                key, holder = node.args[0], node.func.value
        elif isinstance(node, ast.Subscript):
            key, holder = node.slice, node.value
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
            key, holder = node.left, node.comparators[0]
        value = _literal(key) if key is not None else None
        if value in FIELDS and isinstance(holder, ast.Name) and holder.id in holders:
            yield node.lineno, value


def python_hits(path: str, source: str) -> list[Hit]:
    """Run-record names written as literals in a Python module (see the module docstring)."""
    tree = ast.parse(source)
    found: set[tuple[int, str]] = set()
    calls = list(_hash_calls(tree, HASH_COMMANDS))
    for call in calls:
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            found |= set(_field_literals(arg))
    # a dict (or list) built first and handed to a hash command: its literals are fields too
    passed = {n for call in calls for n in _passed_names(call)}
    for targets, value in _assignments(tree):
        if {n for t in targets for n in _names_in(t)} & passed:
            found |= set(_field_literals(value))
            found |= {
                (line, v)
                for t in targets
                if isinstance(t, ast.Subscript)
                for line, v in _field_literals(t.slice)
            }
    holders = _read_names(tree) | passed
    found |= set(_keyed_reads(tree, holders))
    for node in ast.walk(tree):
        value = _literal(node)
        if value in STATES:
            found.add((node.lineno, value))
    return [Hit(path, line, value) for line, value in sorted(found)]


#: A Lua comment, or a string literal (group 1: its text).
_LUA_TOKEN = re.compile(r"--[^\n]*|'([^'\n]*)'|\"([^\"\n]*)\"")


def lua_hits(path: str, source: str) -> list[Hit]:
    """String literals of a Lua script (comments aside) that are a field name or a state."""
    hits = []
    for match in _LUA_TOKEN.finditer(source):
        text = match.group(1) if match.group(1) is not None else match.group(2)
        if text is not None and (text in FIELDS or text in STATES):
            hits.append(Hit(path, source.count("\n", 0, match.start()) + 1, text))
    return hits


def scan(root: Path) -> list[Hit]:
    """Every run-record name written as a literal outside :data:`HOME`, under ``root``."""
    hits: list[Hit] = []
    for top in SCANNED:
        for file in sorted((root / top).rglob("*")):
            relative = file.relative_to(root)
            if relative == HOME or file.suffix not in (".py", ".lua"):
                continue
            source = file.read_text(encoding="utf-8")
            check = python_hits if file.suffix == ".py" else lua_hits
            hits += check(str(relative), source)
    return hits


def test_no_run_record_name_is_written_outside_its_home() -> None:
    hits = "\n".join(map(str, scan(ROOT)))
    assert hits == "", f"run-record names spelt as literals (use RunField / RunState):\n{hits}"


@pytest.mark.parametrize(
    "planted",
    [
        'def f(c, key):\n    return c.hget(key, "worker")\n',
        'def f(c, key):\n    c.hset(key, mapping={"last_error": "x"})\n',
        'def f(c, key):\n    m = {}\n    m["retry_at_ms"] = 1\n    c.hset(key, mapping=m)\n',
        'def f(c, key):\n    return c.hmget(key, [b"status", "result"])\n',
        'FIELDS = ("status", "result")\ndef f(c, key):\n    return c.hmget(key, FIELDS)\n',
        'def f(c, key):\n    raw = c.hgetall(key)\n    return raw.get(b"queue")\n',
        "def f(raw: dict[bytes, bytes]):\n"
        "    fields = {k.decode(): v for k, v in raw.items()}\n"
        '    return "request" in fields and fields["waiting"]\n',
        'def f(view):\n    return view.status == "RUNNING"\n',
    ],
)
def test_the_python_check_catches_a_planted_literal(planted: str) -> None:
    assert python_hits("planted.py", planted) != []


@pytest.mark.parametrize(
    "innocent",
    [
        # the same words, used for other things than a run record
        'payload = {"status": "ok", "tenant": "acme"}\n',
        'def f(kwargs):\n    return kwargs.get("tenant"), kwargs["session_id"]\n',
        'def f(pipe, feed, entry):\n    pipe.xadd(feed, {"status": "x"})\n',
        'def f(c, key):\n    return c.hget(key, "definition")\n',
    ],
)
def test_the_python_check_leaves_other_uses_of_the_words_alone(innocent: str) -> None:
    assert python_hits("innocent.py", innocent) == []


def test_the_lua_check_catches_a_planted_literal() -> None:
    assert lua_hits("x.lua", "redis.call('HSET', K.run, 'status', S.QUEUED)\n") != []
    assert lua_hits("x.lua", 'if status == "RUNNING" then return 1 end\n') != []
    commented = "-- the 'status' field\nredis.call('HSET', K.run, F.STATUS, 1)\n"
    assert lua_hits("x.lua", commented) == []


def test_the_scan_finds_a_literal_planted_in_the_tree(tmp_path: Path) -> None:
    module = tmp_path / "shared" / "runs" / "planted.py"
    module.parent.mkdir(parents=True)
    module.write_text('def f(c, key):\n    return c.hget(key, "started_at_ms")\n')
    (tmp_path / "worker").mkdir()
    (tmp_path / "worker" / "x.lua").write_text("redis.call('HGET', K.run, 'result')\n")
    assert [str(h) for h in scan(tmp_path)] == [
        "shared/runs/planted.py:2: 'started_at_ms'",
        "worker/x.lua:1: 'result'",
    ]


def test_the_record_view_carries_every_field_by_its_name() -> None:
    # RunView is the record as Python reads it: one attribute per field, the same name
    attributes = {f.name for f in dataclasses.fields(RunView)} - {"run_id"}
    assert attributes == {f.value for f in RunField} - {RunField.WORKER.value}


def test_the_feed_entry_names_the_record_s_fields_as_the_record_does() -> None:
    assert {f.value for f in FeedField} - {FeedField.RUN_ID.value} <= FIELDS


@pytest.mark.parametrize("name", ["submit", "claim", "begin", "finish", "cancel", "hand_back"])
def test_scripts_read_the_names_from_the_tables_the_loader_builds_from_the_home(name: str) -> None:
    source = record_script(name).source
    assert "local F = {STATUS = 'status', " in source
    for field in RunField:
        assert f"{field.name} = '{field.value}'" in source
    with pytest.raises(TypeError, match="reads the tables"):
        load(name)  # without them: refused at load, not a nil field at run time


def main(argv: list[str]) -> int:
    """List the run-record literals under a tree (default: this checkout); the count last."""
    root = Path(argv[0]) if argv else ROOT
    hits = scan(root)
    for hit in hits:
        print(hit)
    for kind, names in (("field names", FIELDS), ("states", STATES)):
        found = [h for h in hits if h.value in names]
        py = sum(h.path.endswith(".py") for h in found)
        print(f"{len(found)} run-record {kind} as literals: {py} in .py, {len(found) - py} in .lua")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
