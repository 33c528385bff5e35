"""Every Lua script Tether runs on Redis, one ``.lua`` file each, with named KEYS, ARGV and reply.

A script file starts with a header of ``--`` comment lines::

    -- What the script does, and what it returns.
    -- @include submit                 (optional: a function from lib/<name>.lua, prepended)
    -- @tables F S                     (optional: constant tables the caller passes to load())
    -- @keys run cancel                (KEYS[1], KEYS[2]; a trailing ``...`` takes any number more)
    -- @argv ttl_s [a b]               (ARGV[1]; ``[...]``: a trailing group given whole or not at
    --                                  all; a trailing ``...`` takes any number more)
    -- @reply code run_id              (optional: the slots of a reply that is a list)

The loader prepends the tables, the included functions and a prologue that names the arguments,
so the body reads ``K.run`` and ``A.ttl_s`` rather than ``KEYS[1]`` and ``ARGV[1]``, and the
Python side builds its lists through :meth:`LuaScript.keys` / :meth:`LuaScript.argv` and reads a
reply through :meth:`LuaScript.reply`, by the same names. A name missing on either side fails at
once, not as a wrong key at run time: the Python side when it builds a call, the Lua side when
the script loads (every ``K.x``, ``A.x`` and ``F.x`` it reads must be declared). Key *names*
never appear in a script: every key, or key prefix, is built by :class:`tether.keys.RedisKeys`
and passed in. A table is a ``StrEnum`` the caller owns (the run record's fields:
:func:`tether.runs.queue.record.record_script`), so a script spells none of its values; the
prologue is the same text on every load, so a script's SHA is stable.

A library function in ``lib/`` declares the slots of the list it returns by ``-- @reply`` too;
``tests/test_lua_scripts.py`` holds every ``return {...}`` to its file's declaration.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from importlib import resources
from typing import Any

_TAGS = ("@include", "@tables", "@keys", "@argv", "@reply")
#: A Redis key as the scripts take it (names are ``str``; a scan hands back ``bytes``).
Key = str | bytes
#: What a table entry may hold (its value is written between quotes into the script).
_TABLE_VALUE = re.compile(r"[\w~.:-]*")
#: ``K.run``, ``A.ttl_s``, ``F.STATUS``: a read of a named table (one capital letter).
_TABLE_READ = re.compile(r"(?<![\w.])([A-Z])\.([A-Za-z_]\w*)")


@dataclass(frozen=True)
class LuaScript:
    """One script of the Redis protocol, as its ``.lua`` file declares it.

    Attributes:
        name: the file's stem (``submit`` for ``submit.lua``).
        key_names: the names of ``KEYS[1..n]`` in order.
        arg_names: the names of ``ARGV[1..m]`` in order.
        variadic_keys: more keys may follow the named ones.
        variadic_argv: more arguments may follow the named ones.
        source: the text sent to Redis (tables, included functions, prologue, body).
        optional_keys: the trailing names of ``key_names`` that are given all or none.
        optional_argv: the same for ``arg_names``.
        reply_names: the slots of the script's reply, in order (empty: not a list).
    """

    name: str
    key_names: tuple[str, ...]
    arg_names: tuple[str, ...]
    variadic_keys: bool
    variadic_argv: bool
    source: str
    optional_keys: tuple[str, ...] = ()
    optional_argv: tuple[str, ...] = ()
    reply_names: tuple[str, ...] = ()

    def keys(self, rest: Iterable[Key] = (), /, **named: Key) -> list[Key]:
        """``KEYS`` in declared order from ``named``, then ``rest`` (variadic scripts only)."""
        spec = _Slots(self.key_names, self.optional_keys, self.variadic_keys)
        return _ordered(self, "KEYS", spec, named, rest)

    def argv(self, rest: Iterable[Any] = (), /, **named: Any) -> list[Any]:
        """``ARGV`` in declared order from ``named``, then ``rest`` (variadic scripts only)."""
        spec = _Slots(self.arg_names, self.optional_argv, self.variadic_argv)
        return _ordered(self, "ARGV", spec, named, rest)

    def reply(self, raw: Sequence[Any]) -> dict[str, Any]:
        """The script's reply by slot name; slots a short reply leaves out are None."""
        if not self.reply_names:
            raise TypeError(f"{self.name}.lua declares no reply slots (-- @reply)")
        if len(raw) > len(self.reply_names):
            raise ValueError(
                f"{self.name}.lua replied {len(raw)} values, more than its slots "
                f"{' '.join(self.reply_names)}: its returns and its @reply disagree"
            )
        return dict(itertools.zip_longest(self.reply_names, raw))


@dataclass(frozen=True)
class _Slots:
    names: tuple[str, ...]
    optional: tuple[str, ...]
    variadic: bool

    def declared(self) -> str:
        required = self.names[: len(self.names) - len(self.optional)]
        group = [f"[{' '.join(self.optional)}]"] if self.optional else []
        return " ".join([*required, *group, *(["..."] if self.variadic else [])])


def _ordered(
    script: LuaScript, what: str, spec: _Slots, named: Mapping[str, Any], rest: Iterable[Any]
) -> list[Any]:
    given_optional = any(n in named for n in spec.optional)
    expected = spec.names[: len(spec.names) - (0 if given_optional else len(spec.optional))]
    if len(named) != len(expected) or any(n not in named for n in expected):
        missing = [n for n in expected if n not in named]
        extra = [n for n in named if n not in expected]
        raise TypeError(
            f"{script.name}.lua {what}: missing {missing}, unexpected {extra} "
            f"(declared: {spec.declared()})"
        )
    out = [named[n] for n in expected]
    tail = list(rest)
    if tail and not spec.variadic:
        raise TypeError(f"{script.name}.lua takes no {what} beyond {spec.declared()}")
    return out + tail


def _header(text: str) -> dict[str, list[str]]:
    tags: dict[str, list[str]] = {t: [] for t in _TAGS}
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        words = line[2:].split()
        if words and words[0] in tags:
            tags[words[0]].extend(words[1:])
    return tags


def _slots(name: str, words: list[str]) -> _Slots:
    variadic = bool(words) and words[-1] == "..."
    words = words[:-1] if variadic else words
    text = " ".join(words)
    start = text.find("[")
    if start < 0:
        return _Slots(tuple(words), (), variadic)
    if variadic or not text.endswith("]") or "[" in text[start + 1 :]:
        raise ValueError(f"{name}.lua: an optional group [...] must end its list, alone")
    optional = tuple(text[start + 1 : -1].split())
    return _Slots((*text[:start].split(), *optional), optional, variadic)


def _prologue(table: str, source: str, names: tuple[str, ...]) -> str:
    if not names:
        return ""
    fields = ", ".join(f"{n} = {source}[{i}]" for i, n in enumerate(names, 1))
    return f"local {table} = {{{fields}}}\n"


def _table(name: str, script: str, values: type[Enum]) -> str:
    fields = []
    for member in values:
        value = str(member.value)
        if not _TABLE_VALUE.fullmatch(value):
            raise ValueError(f"{script}.lua: table {name}'s {member.name} holds {value!r}")
        fields.append(f"{member.name} = '{value}'")
    return f"local {name} = {{{', '.join(fields)}}}\n"


def _check_reads(name: str, source: str, known: Mapping[str, Iterable[str]]) -> None:
    """Every ``X.y`` the script reads names a declared table and entry (comments and string
    literals aside): a misspelt ``K.rnu`` would otherwise be nil at run time."""
    code = re.sub(r"--[^\n]*|'[^'\n]*'|\"[^\"\n]*\"", "", source)
    for table, entry in _TABLE_READ.findall(code):
        if table not in known or entry not in known[table]:
            declared = " ".join(known.get(table, ())) or "nothing"
            raise ValueError(
                f"{name}.lua reads {table}.{entry}, but {table} declares {declared}: "
                "add it to the header (-- @keys, -- @argv, -- @tables) or fix the name"
            )


def _read(relative: str) -> str:
    return resources.files(__package__).joinpath(relative).read_text(encoding="utf-8")


def reply_of(relative: str) -> tuple[str, ...]:
    """The reply slots ``relative`` (``claim.lua``, ``lib/submit.lua``) declares."""
    return tuple(_header(_read(relative))["@reply"])


@functools.cache
def load(name: str, **tables: type[Enum]) -> LuaScript:
    """The script ``<name>.lua`` of this package, parsed once per process.

    ``tables``: the constant tables its ``-- @tables`` line names (others are not prepended).
    """
    body = _read(f"{name}.lua")
    tags = _header(body)
    keys, argv = _slots(name, tags["@keys"]), _slots(name, tags["@argv"])
    missing = [t for t in tags["@tables"] if t not in tables]
    if missing:
        raise TypeError(f"{name}.lua reads the tables {missing}: pass them to load()")
    prelude = "".join(_table(t, name, tables[t]) for t in tags["@tables"])
    included = "".join(_read(f"lib/{lib}.lua") for lib in tags["@include"])
    source = (
        prelude
        + included
        + _prologue("K", "KEYS", keys.names)
        + _prologue("A", "ARGV", argv.names)
        + body
    )
    known = {t: tuple(tables[t].__members__) for t in tags["@tables"]}
    _check_reads(name, source, {"K": keys.names, "A": argv.names, **known})
    return LuaScript(
        name,
        keys.names,
        argv.names,
        keys.variadic,
        argv.variadic,
        source,
        keys.optional,
        argv.optional,
        tuple(tags["@reply"]),
    )
