"""#46: every sync/asyncio pair shows the same public surface, and twins follow one naming scheme.

**The naming scheme.** The asyncio twin of module ``m`` is ``m_aio`` beside it (the twin of a
package ``p`` is the sibling module ``p_aio``); the twin of class ``X`` is ``AsyncX``, of function
``f`` is ``async_f``; a twin's ``close`` is ``aclose`` and its context manager is ``async with``
(``__aenter__``/``__aexit__``). Asyncio code lives only in ``_aio`` modules, and every public
class and function of an ``_aio`` module is the twin of a pair listed in :data:`PAIRS` or is
listed in :data:`ASYNC_ONLY`. The logic both twins use is written once, in a sans-IO core both
import (named beside each pair); the twins only do I/O.

**The surface of a pair** is compared member by member: for a class, the public methods and
properties it defines or inherits from Tether classes (and ``__init__``, ``__await__``, the
context-manager methods); for a function, itself. Two members agree when they are the same kind
(method, property, ...), take the same parameters (names, kinds, defaults; not the annotations,
which name each side's types) and their docstrings' first lines read the same after
:func:`wording` (which takes out what says "asyncio" rather than what the member does). Instance
attributes are not compared.

A difference fails the test unless :data:`ALLOWED` lists it with its reason; an entry that no
longer matches a difference fails it too, so the list stays as short as the differences are.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The package's folders and the names they install as.
ROOTS = {"shared": "tether", "producer": "tether.producer", "worker": "tether.worker"}


@dataclass(frozen=True)
class Pair:
    """A sync symbol (``module:name``); its asyncio twin is named by the scheme.

    ``roles``: for a class whose twin takes over only some of its roles, the Protocols of
    :mod:`tether.runs.queue.base` whose members are compared (None: every member).
    ``core``: where the logic both use lives (documentation: the reader's map).
    """

    sync: str
    core: str
    roles: tuple[str, ...] | None = None


PAIRS = [
    Pair("tether.producer.client:Producer", "producer.submission, producer.base"),
    Pair("tether.producer.handle:RunHandle", "producer.settlement"),
    Pair("tether.producer.handle:HandleOwner", "(the Protocol a handle needs of its producer)"),
    Pair("tether.producer.handle:Records", "(the Protocol of the records a handle reads)"),
    Pair("tether.producer.listener:CompletionListener", "producer.settlement"),
    Pair("tether.producer.listener:RunFeed", "(the Protocol of what a listener reads)"),
    Pair("tether.producer.worker_watch:watch_for_workers", "producer.worker_watch's pure part"),
    Pair("tether.producer.worker_watch:warn_if_unconsumed", "producer.worker_watch's pure part"),
    Pair("tether.producer.worker_watch:live_consumers", "runs.presence.presences"),
    Pair("tether.producer.worker_watch:WatchedProducer", "(the Protocol the watch needs)"),
    # the asyncio queue serves producers: the producer's roles (SessionQueue and Recovery are
    # the worker's, which runs on the blocking client)
    Pair(
        "tether.runs.queue.redis:RedisRunQueue",
        "runs.queue.redis._common, runs.queue.redis.completions",
        roles=("Submissions", "Cancellation", "Completions"),
    ),
    Pair("tether.persistence.streams.redis:RedisEventStream", "streams._common, TailState"),
    Pair("tether.persistence.deltas.live_redis:RedisLiveFeed", "FollowState, deltas.live"),
    Pair("tether.persistence.redis_conn:redis_from_url", "redis_conn.client_options"),
    Pair(
        "tether.runs.usage.redis:RedisTenantAdmission",
        "usage.redis.queue_admit_reads, admit_verdict",
    ),
]

#: Public classes and functions of ``_aio`` modules that have no sync twin, and why.
ASYNC_ONLY = {
    # coalesces the calls of one event-loop turn into one round trip: a thread has no turns
    # (the blocking producer batches what one caller hands it, submit_many)
    "tether.producer.batcher_aio:TurnBatcher",
    # Celery has no asyncio client: the asyncio producer publishes from a thread of its own,
    # the blocking one on its caller's thread (publish.publish_runs)
    "tether.producer.publish_aio:BackgroundPublisher",
}

#: Differences between twins that are meant, keyed ``(sync symbol, member)``, each with why.
ALLOWED = {
    # a concurrent.futures.Future's callback, for wait()/as_completed(); asyncio code awaits
    # the handle or wraps that in a task
    ("RunHandle", "add_done_callback"): "the Future protocol",
    # a property cannot await: the ids of a reattached asyncio handle are read by one call,
    # where RunHandle's properties read them on first use
    ("RunHandle", "load"): "asyncio only: properties cannot await",
    # an alias from the first AsyncProducer (#17) that the blocking producer never had
    ("Producer", "submit"): "asyncio only: the alias of run_async kept for its callers",
    # a worker's reads at its step boundaries: there is no asyncio worker
    ("RedisRunQueue", "cancel_requested"): "worker side",
    ("RedisRunQueue", "stop_mode"): "worker side",
    # the asyncio stream is the producers' follower: workers append and trim, and read whole
    # views, on the blocking client (and only its writes take retention options)
    ("RedisEventStream", "append"): "writer side",
    ("RedisEventStream", "append_marked"): "writer side: a worker's step boundary",
    ("RedisEventStream", "trim"): "writer side",
    ("RedisEventStream", "compact"): "writer side: a worker, when a session goes idle",
    ("RedisEventStream", "read"): "writer side",
    ("RedisEventStream", "__init__"): "writer side: max_len, retention_s",
    # the sync feed is composed from the event stream and the delta channel it is given; no
    # asyncio delta channel exists, so the asyncio feed reads both keys from its client
    ("RedisLiveFeed", "__init__"): "composed (sync) vs reading its client (asyncio)",
}

#: Members of a sync class and their names in the twin.
RENAMES = {"close": "aclose", "__enter__": "__aenter__", "__exit__": "__aexit__"}
#: Dunder members that belong to a surface.
DUNDERS = {"__init__", "__await__", "__enter__", "__exit__", "__aenter__", "__aexit__"}
#: What :func:`wording` takes out, in order.
WORDING = (
    (re.compile(r"\bAsync(?=[A-Z])"), ""),  # AsyncRunHandle: RunHandle
    (re.compile(r"\basync_(?=[a-z])"), ""),  # async_redis_from_url: redis_from_url
    (re.compile(r"_aio\b"), ""),  # tether.producer.client_aio: tether.producer.client
    (re.compile(r"\baclose\b"), "close"),
    (re.compile(r"\b([Aa])n (?:asyncio|async) "), r"\1 "),  # an asyncio client: a client
    (re.compile(r"\b(?:asyncio|async|await)\b ?"), ""),  # the words themselves
    (re.compile(r"\s+"), " "),
)


def wording(line: str) -> str:
    """A docstring's first line without its asyncio wording: ``Async`` before a class name,
    ``async_`` before a function name, ``_aio`` after a module name, ``aclose`` for ``close``,
    "an asyncio" for "a", and the words "asyncio", "async", "await"."""
    for pattern, repl in WORDING:
        line = pattern.sub(repl, line)
    return line.strip()


def twin_name(sync: str) -> str:
    """``module:name`` of the asyncio twin of ``module:name`` (the naming scheme)."""
    module, _, name = sync.partition(":")
    twin = f"Async{name}" if name[:1].isupper() else f"async_{name}"
    return f"{module}_aio:{twin}"


def load(symbol: str) -> Any:
    module, _, name = symbol.partition(":")
    return getattr(importlib.import_module(module), name)


# --- the surface --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """What is compared of one member."""

    kind: str
    params: tuple[tuple[str, str, str], ...]
    doc: str


def _public(name: str) -> bool:
    return not name.startswith("_") or name in DUNDERS


def _params(func: Callable[..., Any], method: bool) -> tuple[tuple[str, str, str], ...]:
    params = list(inspect.signature(func).parameters.values())
    if method and params:
        params = params[1:]  # self
    return tuple(
        (p.name, p.kind.name, "" if p.default is p.empty else repr(p.default)) for p in params
    )


def _doc(obj: Any) -> str:
    """The first line of ``obj``'s own docstring (not one it inherits), in :func:`wording`."""
    doc = inspect.cleandoc(obj.__doc__ or "")
    return wording(doc.splitlines()[0]) if doc else ""


def member(obj: Any, method: bool) -> Member:
    if isinstance(obj, property):
        return Member("property", (), _doc(obj))
    if isinstance(obj, (staticmethod, classmethod)):
        kind, func, method = type(obj).__name__, obj.__func__, isinstance(obj, classmethod)
    else:
        kind, func = "method" if method else "function", obj
    return Member(kind, _params(func, method), _doc(func))


def surface(obj: Any, names: set[str] | None = None) -> dict[str, Member]:
    """The compared members of a class (those in ``names`` only, when given), or of a function
    (under its own name)."""
    if not inspect.isclass(obj):
        return {"": member(obj, method=False)}
    found: dict[str, Member] = {}
    for klass in obj.__mro__:
        if not klass.__module__.startswith("tether"):
            continue
        for name, value in vars(klass).items():
            if name in found or not _public(name) or (names is not None and name not in names):
                continue
            if name == "__init__" and not value.__module__.startswith("tether"):
                continue  # a Protocol's placeholder
            if callable(value) or isinstance(value, (property, staticmethod, classmethod)):
                found[name] = member(value, method=True)
    return found


def role_members(roles: tuple[str, ...]) -> set[str]:
    base = importlib.import_module("tether.runs.queue.base")
    names: set[str] = set()
    for role in roles:
        names.update(n for n in vars(getattr(base, role)) if _public(n) and n != "__init__")
    return names


def drift(sync: Any, twin: Any, names: set[str] | None = None) -> dict[str, str]:
    """Every difference between the surfaces of ``sync`` and ``twin``, by sync member name."""
    ours, theirs = surface(sync, names), surface(twin)
    out: dict[str, str] = {}
    for name, mine in ours.items():
        other = theirs.pop(RENAMES.get(name, name), None)
        if other is None:
            out[name] = "missing from the asyncio twin"
        elif mine != other:
            out[name] = f"differs:\n    sync:    {mine}\n    asyncio: {other}"
    inverse = {v: k for k, v in RENAMES.items()}
    for name in theirs:
        out[inverse.get(name, name)] = "only in the asyncio twin"
    return out


# --- the tests ----------------------------------------------------------------------------------


def test_twins_show_the_same_surfaces() -> None:
    found: dict[tuple[str, str], str] = {}
    for pair in PAIRS:
        sync, twin = load(pair.sync), load(twin_name(pair.sync))
        names = role_members(pair.roles) | {"__init__"} if pair.roles else None
        short = pair.sync.partition(":")[2]
        for name, why in drift(sync, twin, names).items():
            found[(short, name)] = why
    unexplained = {k: v for k, v in found.items() if k not in ALLOWED}
    stale = sorted(set(ALLOWED) - set(found))
    assert not unexplained, "twins drifted apart:\n" + "\n".join(
        f"  {s}.{m}: {why}" for (s, m), why in sorted(unexplained.items())
    )
    assert not stale, f"allowed differences that are gone (remove them from ALLOWED): {stale}"


def _aio_modules() -> dict[str, Path]:
    """Every module of the package with "aio" in its name, by dotted name."""
    out: dict[str, Path] = {}
    for folder, dotted in ROOTS.items():
        for path in (REPO / folder).rglob("*aio*.py"):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            out[".".join([dotted, *parts])] = path
    return out


def test_twin_modules_follow_one_naming_scheme() -> None:
    misnamed = sorted(
        name for name, path in _aio_modules().items() if not path.stem.endswith("_aio")
    )
    assert not misnamed, f"an asyncio module is named <sync module>_aio: rename {misnamed}"
    twins = {twin_name(p.sync) for p in PAIRS}
    unpaired = []
    for name in _aio_modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            defined_here = getattr(value, "__module__", None) == name
            if attr.startswith("_") or not defined_here or not callable(value):
                continue
            symbol = f"{name}:{attr}"
            if symbol not in twins and symbol not in ASYNC_ONLY:
                unpaired.append(symbol)
    assert not unpaired, (
        f"public asyncio symbols with no listed sync twin (add the pair to PAIRS, or the "
        f"symbol to ASYNC_ONLY with why): {unpaired}"
    )


def test_every_listed_twin_exists_under_its_scheme_name() -> None:
    twins = {twin_name(p.sync) for p in PAIRS}
    for symbol in [*twins, *ASYNC_ONLY]:
        assert load(symbol) is not None, symbol
    assert not twins & ASYNC_ONLY, "a listed twin is not asyncio-only"


def test_the_wording_rules() -> None:
    assert wording("Submitted by :class:`AsyncProducer`.") == "Submitted by :class:`Producer`."
    assert wording("Stop it (``await producer.aclose()``)") == "Stop it (``producer.close()``)"
    assert wording("See :mod:`tether.producer.client_aio`") == "See :mod:`tether.producer.client`"
    assert wording("async_redis_from_url for asyncio  code") == "redis_from_url for code"
    assert wording("An asyncio Redis client for ``url``.") == "A Redis client for ``url``."


# --- the check sees drift ------------------------------------------------------------------------


class _Sync:
    def get(self, key: str, *, timeout: float | None = None) -> str:
        """Read ``key``."""
        return key

    def close(self) -> None:
        """Close it."""

    @property
    def size(self) -> int:
        """How many."""
        return 0


class _Twin:
    async def get(self, key: str, *, timeout: float | None = None) -> str:
        """Read ``key``."""
        return key

    async def aclose(self) -> None:
        """Close it."""

    @property
    def size(self) -> int:
        """How many."""
        return 0


def test_the_check_sees_drift(monkeypatch: pytest.MonkeyPatch) -> None:
    # the surface walks the classes of Tether only
    monkeypatch.setattr(_Twin, "__module__", "tether.fake")
    monkeypatch.setattr(_Sync, "__module__", "tether.fake")
    assert drift(_Sync, _Twin) == {}

    async def get(self: Any, key: str, *, timeout: float = 1.0) -> str:
        """Read ``key``."""
        return key

    monkeypatch.setattr(_Twin, "get", get)  # another default
    assert list(drift(_Sync, _Twin)) == ["get"]

    async def worded(self: Any, key: str, *, timeout: float | None = None) -> str:
        """Read ``key`` and more."""
        return key

    monkeypatch.setattr(_Twin, "get", worded)  # another first line
    assert list(drift(_Sync, _Twin)) == ["get"]
    monkeypatch.delattr(_Twin, "get")  # a method gone
    assert drift(_Sync, _Twin) == {"get": "missing from the asyncio twin"}
    monkeypatch.setattr(_Twin, "extra", worded, raising=False)
    assert "extra" in drift(_Sync, _Twin)
