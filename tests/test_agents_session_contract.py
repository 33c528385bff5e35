"""#29 item 8: ``TetherSession`` behaves like the Agents SDK's own ``SQLiteSession``.

One behavioural suite, run on both (``[sqlite]`` is the reference the SDK ships, ``[tether]`` a
``TetherSession`` on a file store with its event archive, ``[tether-update-log]`` the same with
head updates appended to the head's update log): limits (also above the length, where
``TetherSession`` returned too few), ``session_settings`` from a dict or an object (a dict was kept
as a dict and ``Runner.run`` failed with ``AttributeError``), ordering, pop, clear, concurrent
writers and isolation between ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.errors import InvalidInput
from tether.integrations.openai_agents import TetherSession
from tether.persistence.storage_url import open_storage
from tether.persistence.stores import LocalSnapshotStore

MakeSession = Callable[..., Any]

# The SDK (about 2 s to import) is imported where it is used, not when pytest collects this file
# in every test process.


@pytest.fixture(params=["sqlite", "tether", "tether-update-log"])
def make_session(request: pytest.FixtureRequest, tmp_path: Path) -> MakeSession:
    """A factory of sessions on one storage: ``make_session(id, session_settings=...)``."""
    if request.param == "sqlite":
        from agents.memory import SQLiteSession

        db = tmp_path / "sessions.db"

        def sqlite(session_id: str, **kw: Any) -> Any:
            return SQLiteSession(session_id, db_path=db, **kw)

        @contextlib.contextmanager
        def hold_sqlite_writes(session_id: str) -> Iterator[None]:
            # another connection's write transaction: the session's writes wait (busy timeout)
            other = sqlite3.connect(db, isolation_level=None)
            try:
                other.execute("BEGIN IMMEDIATE")
                yield
                other.execute("COMMIT")
            finally:
                other.close()

        sqlite.hold_writes = hold_sqlite_writes  # type: ignore[attr-defined]
        return sqlite

    def tether(session_id: str, **kw: Any) -> Any:
        store, archive = open_storage(f"file://{tmp_path / 'store'}")
        if request.param == "tether-update-log":  # head updates appended to the head's log
            store = LocalSnapshotStore(tmp_path / "store", update_log=True)
        return TetherSession(session_id, store=store, archive=archive, **kw)

    @contextlib.contextmanager
    def hold_tether_writes(session_id: str) -> Iterator[None]:
        # the session directory's lock, as another process's writer holds it
        fd = os.open(tmp_path / "store" / "v1" / "default" / session_id / ".lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    tether.hold_writes = hold_tether_writes  # type: ignore[attr-defined]
    return tether


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def texts(items: list[Any]) -> list[str]:
    return [str(item["content"]) for item in items]


def test_limits_give_the_newest_items_in_order(make_session: MakeSession) -> None:
    session = make_session("limits")
    for n in range(7):
        asyncio.run(session.add_items([user(f"m{n}")]))
    everything = [f"m{n}" for n in range(7)]
    assert texts(asyncio.run(session.get_items())) == everything
    assert texts(asyncio.run(session.get_items(limit=10))) == everything  # 7 of 10: all 7
    assert texts(asyncio.run(session.get_items(limit=12))) == everything
    assert texts(asyncio.run(session.get_items(limit=5))) == everything[-5:]
    assert texts(asyncio.run(session.get_items(limit=1))) == ["m6"]
    assert asyncio.run(session.get_items(limit=0)) == []
    # a negative limit is no limit, as SQLite's LIMIT -1 (TetherSession refused it)
    assert texts(asyncio.run(session.get_items(limit=-1))) == everything
    negative = make_session("limits", session_settings={"limit": -3})
    assert texts(asyncio.run(negative.get_items())) == everything


@pytest.mark.parametrize(
    "settings",
    [{"limit": 1, "bogus": 2}, {"limit": "many"}, object()],
    ids=["field", "type", "obj"],
)
def test_settings_that_are_not_session_settings_are_refused(
    make_session: MakeSession, settings: Any, tmp_path: Path
) -> None:
    """An unknown field, a wrong type or a foreign object: refused when the session is made,
    with the exception type the SDK's own session raises (TetherSession kept an unknown field's
    dict and any object, then refused them with InvalidInput where the SDK raises TypeError)."""
    from agents.memory import SQLiteSession

    with pytest.raises(Exception) as sdk:
        SQLiteSession("reference", db_path=tmp_path / "reference.db", session_settings=settings)
    with pytest.raises(Exception) as refused:
        make_session("refused", session_settings=settings)
    assert type(refused.value) is type(sdk.value), (refused.value, sdk.value)
    assert not isinstance(refused.value, InvalidInput)


@pytest.mark.parametrize("form", ["dict", "obj"])
def test_session_settings_from_a_dict_or_an_object(make_session: MakeSession, form: str) -> None:
    from agents import Runner
    from agents.memory import SessionSettings

    from tests.support.sdk_agents import shouter

    settings = {"limit": 2} if form == "dict" else SessionSettings(limit=2)
    session = make_session("settings", session_settings=settings)
    assert isinstance(session.session_settings, SessionSettings)
    assert session.session_settings.limit == 2
    asyncio.run(session.add_items([user("a"), user("b"), user("c")]))
    assert texts(asyncio.run(session.get_items())) == ["b", "c"]  # the settings' limit
    assert texts(asyncio.run(session.get_items(limit=3))) == ["a", "b", "c"]  # explicit wins
    # the SDK's Runner reads the settings as attributes
    result = asyncio.run(Runner.run(shouter(), "hello", session=session))
    assert str(result.final_output).startswith("heard HELLO")


def test_no_settings_means_no_limit(make_session: MakeSession) -> None:
    from agents.memory import SessionSettings

    session = make_session("defaults")
    assert isinstance(session.session_settings, SessionSettings)
    assert session.session_settings.limit is None


def test_items_keep_their_order_across_writes(make_session: MakeSession) -> None:
    session = make_session("order")
    asyncio.run(session.add_items([user("a"), user("b")]))
    asyncio.run(session.add_items([]))
    asyncio.run(session.add_items([user("c")]))
    assert texts(asyncio.run(session.get_items())) == ["a", "b", "c"]


def test_pop_returns_the_newest_and_none_when_empty(make_session: MakeSession) -> None:
    session = make_session("pop")
    assert asyncio.run(session.pop_item()) is None
    asyncio.run(session.add_items([user("a"), user("b")]))
    assert asyncio.run(session.pop_item()) == user("b")
    assert texts(asyncio.run(session.get_items())) == ["a"]
    assert asyncio.run(session.pop_item()) == user("a")
    assert asyncio.run(session.pop_item()) is None


def test_clear_empties_the_session_and_it_goes_on(make_session: MakeSession) -> None:
    session = make_session("clear")
    asyncio.run(session.clear_session())  # clearing nothing is fine
    asyncio.run(session.add_items([user("a"), user("b")]))
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []
    asyncio.run(session.add_items([user("c")]))
    assert texts(asyncio.run(session.get_items())) == ["c"]


def test_ids_are_isolated(make_session: MakeSession) -> None:
    one, two = make_session("one"), make_session("two")
    asyncio.run(one.add_items([user("for one")]))
    asyncio.run(two.add_items([user("for two")]))
    asyncio.run(one.clear_session())
    assert asyncio.run(one.get_items()) == []
    assert texts(asyncio.run(two.get_items())) == ["for two"]
    assert texts(asyncio.run(make_session("two").get_items())) == ["for two"]  # another object


def test_concurrent_writers_lose_no_item(make_session: MakeSession) -> None:
    writers, per_writer = 4, 8

    def write(n: int) -> None:
        session = make_session("race")  # one object per writer
        for i in range(per_writer):
            asyncio.run(session.add_items([user(f"w{n}-{i}")]))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    got = texts(asyncio.run(make_session("race").get_items()))
    assert sorted(got) == sorted(f"w{n}-{i}" for n in range(writers) for i in range(per_writer))
    for n in range(writers):  # each writer's items in its own order
        mine = [t for t in got if t.startswith(f"w{n}-")]
        assert mine == [f"w{n}-{i}" for i in range(per_writer)]


@pytest.mark.parametrize("op", ["add", "pop", "clear"])
def test_a_cancelled_write_ends_before_its_cancellation_is_raised(
    make_session: MakeSession, op: str
) -> None:
    """The SDK's sessions finish a write whose caller is cancelled before they raise its
    ``CancelledError`` (its ``_await_mutation``), so that a cancelled ``Runner.run`` leaves no
    write running behind it; ``TetherSession`` raised at once, with its write still to come."""
    session = make_session("cancelled")
    asyncio.run(session.add_items([user("m0"), user("m1")]))
    write = {
        "add": lambda: session.add_items([user("m2")]),
        "pop": session.pop_item,
        "clear": session.clear_session,
    }[op]

    async def cancel_while_it_waits() -> bool:
        with make_session.hold_writes("cancelled"):  # type: ignore[attr-defined]
            task = asyncio.ensure_future(write())
            await asyncio.sleep(0.2)  # the write now waits for the lock
            task.cancel()
            await asyncio.sleep(0.3)
            waited = not task.done()  # the lock is held: the write cannot have ended
        with pytest.raises(asyncio.CancelledError):
            await task
        return waited

    assert asyncio.run(cancel_while_it_waits())
    expected = {"add": ["m0", "m1", "m2"], "pop": ["m0"], "clear": []}[op]
    assert texts(asyncio.run(make_session("cancelled").get_items())) == expected


@pytest.mark.parametrize("op", ["pop", "clear"])
def test_pop_and_clear_see_what_another_object_wrote_since(
    make_session: MakeSession, op: str
) -> None:
    """One object empties the session, another adds to it, then the first pops or clears: it
    acts on what is stored now. ``TetherSession`` judged "nothing to do" on the head it had
    saved last and silently did nothing."""
    first, second = make_session("stale"), make_session("stale")
    asyncio.run(first.add_items([user("old")]))
    asyncio.run(first.clear_session())  # first now holds an empty head of its own
    asyncio.run(second.add_items([user("secret plan"), user("x")]))
    if op == "pop":
        assert asyncio.run(first.pop_item()) == user("x")
        assert texts(asyncio.run(make_session("stale").get_items())) == ["secret plan"]
    else:
        asyncio.run(first.clear_session())
        assert asyncio.run(make_session("stale").get_items()) == []


def test_a_lone_surrogate_is_refused_clearly_and_nothing_is_stored(tmp_path: Path) -> None:
    """Where ``TetherSession`` differs on purpose: text that is not valid Unicode (``SQLiteSession``
    stores it) is refused with ``InvalidInput`` naming the cause, not pydantic's serialization
    error, and the session is as it was."""
    store, archive = open_storage(f"file://{tmp_path / 'store'}")
    session = TetherSession("surrogate", store=store, archive=archive)
    asyncio.run(session.add_items([user("ok")]))
    with pytest.raises(InvalidInput, match=r"lone surrogate.*Nothing was stored"):
        asyncio.run(session.add_items([user("a\ud800b")]))
    assert asyncio.run(session.get_items()) == [user("ok")]
    again = TetherSession("surrogate", store=store, archive=archive)
    asyncio.run(again.add_items([user("next")]))
    assert texts(asyncio.run(again.get_items())) == ["ok", "next"]


@pytest.mark.parametrize("depth", [300, 2000])
def test_an_item_nested_too_deeply_is_refused_clearly_and_nothing_is_stored(
    tmp_path: Path, depth: int
) -> None:
    """Where ``TetherSession`` differs on purpose, like a lone surrogate: an item nested past
    what a stored head can be read back at is refused with ``InvalidInput`` (it was pydantic's
    2,000-character error at 300 levels and a bare ``RecursionError`` at 2,000)."""
    store, archive = open_storage(f"file://{tmp_path / 'store'}")
    session = TetherSession("deep", store=store, archive=archive)
    asyncio.run(session.add_items([user("ok")]))
    value: object = "leaf"
    for _ in range(depth):
        value = {"a": value}
    with pytest.raises(InvalidInput, match=r"nested too deeply.*Nothing was stored"):
        asyncio.run(session.add_items([{"type": "custom", "payload": value}]))
    assert asyncio.run(session.get_items()) == [user("ok")]
