"""Every Lua script Tether runs on Redis, one ``.lua`` file each, with named KEYS and ARGV.

A script file starts with a header of ``--`` comment lines::

    -- What the script does, and what it returns.
    -- @include submit                 (optional: a function from lib/<name>.lua, prepended)
    -- @keys run cancel                (KEYS[1], KEYS[2]; a trailing ``...`` takes any number more)
    -- @argv ttl_s                     (ARGV[1]; a trailing ``...`` likewise)

The loader prepends the included functions and a prologue that names the arguments, so the body
reads ``K.run`` and ``A.ttl_s`` rather than ``KEYS[1]`` and ``ARGV[1]``, and the Python side
builds its lists through :meth:`LuaScript.keys` / :meth:`LuaScript.argv` by the same names: a
name missing on either side fails at once, not as a wrong key at run time. Key *names* never
appear in a script: every key, or key prefix, is built by :class:`tether.keys.RedisKeys` and
passed in.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

_TAGS = ("@include", "@keys", "@argv")
#: A Redis key as the scripts take it (names are ``str``; a scan hands back ``bytes``).
Key = str | bytes


@dataclass(frozen=True)
class LuaScript:
    """One script of the Redis protocol, as its ``.lua`` file declares it.

    Attributes:
        name: the file's stem (``submit`` for ``submit.lua``).
        key_names: the names of ``KEYS[1..n]`` in order.
        arg_names: the names of ``ARGV[1..m]`` in order.
        variadic_keys: more keys may follow the named ones.
        variadic_argv: more arguments may follow the named ones.
        source: the text sent to Redis (included functions, prologue, body).
    """

    name: str
    key_names: tuple[str, ...]
    arg_names: tuple[str, ...]
    variadic_keys: bool
    variadic_argv: bool
    source: str

    def keys(self, rest: Iterable[Key] = (), /, **named: Key) -> list[Key]:
        """``KEYS`` in declared order from ``named``, then ``rest`` (variadic scripts only)."""
        return _ordered(self, "KEYS", self.key_names, self.variadic_keys, named, rest)

    def argv(self, rest: Iterable[Any] = (), /, **named: Any) -> list[Any]:
        """``ARGV`` in declared order from ``named``, then ``rest`` (variadic scripts only)."""
        return _ordered(self, "ARGV", self.arg_names, self.variadic_argv, named, rest)


def _ordered(
    script: LuaScript,
    what: str,
    names: tuple[str, ...],
    variadic: bool,
    named: Mapping[str, Any],
    rest: Iterable[Any],
) -> list[Any]:
    if len(named) != len(names) or any(n not in named for n in names):
        missing = [n for n in names if n not in named]
        extra = [n for n in named if n not in names]
        raise TypeError(
            f"{script.name}.lua {what}: missing {missing}, unexpected {extra} "
            f"(declared: {' '.join(names)})"
        )
    out = [named[n] for n in names]
    tail = list(rest)
    if tail and not variadic:
        raise TypeError(f"{script.name}.lua takes no {what} beyond {' '.join(names)}")
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


def _names(words: list[str]) -> tuple[tuple[str, ...], bool]:
    variadic = bool(words) and words[-1] == "..."
    return tuple(words[:-1] if variadic else words), variadic


def _prologue(table: str, source: str, names: tuple[str, ...]) -> str:
    if not names:
        return ""
    fields = ", ".join(f"{n} = {source}[{i}]" for i, n in enumerate(names, 1))
    return f"local {table} = {{{fields}}}\n"


def _read(relative: str) -> str:
    return resources.files(__package__).joinpath(relative).read_text(encoding="utf-8")


@functools.cache
def load(name: str) -> LuaScript:
    """The script ``<name>.lua`` of this package, parsed once per process."""
    body = _read(f"{name}.lua")
    tags = _header(body)
    key_names, variadic_keys = _names(tags["@keys"])
    arg_names, variadic_argv = _names(tags["@argv"])
    included = "".join(_read(f"lib/{lib}.lua") for lib in tags["@include"])
    source = included + _prologue("K", "KEYS", key_names) + _prologue("A", "ARGV", arg_names) + body
    return LuaScript(name, key_names, arg_names, variadic_keys, variadic_argv, source)
