"""#29 item 8 (P13): an Agents SDK ``add_items`` on the local store is one small patch record in
the head's journal, not a new head, and every reader folds the patches into exactly the head a
full save writes.

Real files under ``tmp_path`` throughout: the journal is a file format, so the tests write,
tear and corrupt its bytes and read them back through the store, the reader and the SDK
session alike.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import random
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.races import append_in_threads
from tether import SessionLogReader
from tether.errors import SnapshotCorrupt, UnsupportedSchemaVersion, VersionConflict
from tether.integrations.openai_agents import TetherSession
from tether.persistence import objects
from tether.persistence.blobs import local_log
from tether.persistence.journal import HeadJournal
from tether.persistence.objects import HEAD_KIND, unseal
from tether.persistence.saving import ARCHIVE_BATCH_EVENTS
from tether.persistence.storage_url import open_storage
from tether.persistence.stores import LocalSnapshotStore

T = "default"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def texts(items: list[Any]) -> list[str]:
    return [str(item["content"]) for item in items]


def session_on(root: Path, session_id: str = "s") -> TetherSession:
    store, archive = open_storage(f"file://{root}")
    return TetherSession(session_id, store=store, archive=archive)


def session_dir(root: Path, session_id: str = "s") -> Path:
    return root / "v1" / T / session_id


def journal_bytes(root: Path, session_id: str = "s") -> bytes:
    return (session_dir(root, session_id) / ".head.json.log").read_bytes()


def patch_count(root: Path, session_id: str = "s") -> int:
    return journal_bytes(root, session_id).count(b"\0TLOGPAT")


def test_appends_are_patches_and_every_reader_sees_them(tmp_path: Path) -> None:
    session = session_on(tmp_path)
    session.append_items([user("first")])  # creates the session: a whole head
    for n in range(5):
        session.append_items([user(f"m{n}")])
    assert patch_count(tmp_path) == 5
    log = journal_bytes(tmp_path)
    assert log.startswith(b"TLOG2 ")
    # the object file is marked: a build without journals refuses it instead of reading it
    head = (session_dir(tmp_path) / "head.json").read_bytes()
    assert head.startswith(b'{"tether":"head","envelope":2,')
    expected = ["first", *[f"m{n}" for n in range(5)]]
    # a fresh session object (another process), the store whole, the offline reader
    assert texts(session_on(tmp_path).read_items()) == expected
    store = LocalSnapshotStore(tmp_path)
    stored = store.load(T, "s")
    assert stored is not None and stored.snapshot.last_seq == 6
    assert len(stored.snapshot.memory.items) == 6
    reader = SessionLogReader(*open_storage(f"file://{tmp_path}"))
    assert reader.verify("s").ok
    assert reader.project("s") == stored.snapshot.memory
    assert [e.seq for e in reader.events("s")] == [1, 2, 3, 4, 5, 6]


def test_the_folded_head_is_the_head_a_full_save_writes(tmp_path: Path) -> None:
    """Random appends, pops and clears across chunk seals and archive batches: after every
    write, the head a reader folds from the journal equals the head this writer would have
    written whole (every field), and the event contract holds."""
    rng = random.Random(29)
    session = session_on(tmp_path)
    store = LocalSnapshotStore(tmp_path)
    expected: list[str] = []
    patches_seen = 0
    for step in range(400):
        roll = rng.random()
        if roll < 0.9 or not expected:
            batch = [f"i{step}-{k}" for k in range(rng.choice([1, 1, 1, 2, 3]))]
            session.append_items([user(t) for t in batch])
            expected += batch
        elif roll < 0.98:
            popped = session.remove_last_item()
            assert popped is not None and popped["content"] == expected.pop()
        else:
            session.clear_items()
            expected = []
        live = session._live
        if live is not None:  # the last write was a patch: compare with a whole save
            patches_seen += 1
            folded = store.load_shallow(T, "s")
            assert folded is not None and folded.version == live.session.version
            whole = live.snapshot()
            outbox = [e for e in whole.events if e.seq > whole.archived_seq]
            whole = whole.model_copy(
                update={"events": outbox, "archive_batch_events": live.stored_batch}
            )
            assert folded.snapshot.model_dump() == whole.model_dump()
    assert patches_seen > 200
    assert texts(session_on(tmp_path).read_items()) == expected
    reader = SessionLogReader(*open_storage(f"file://{tmp_path}"))
    report = reader.verify("s")
    assert report.ok, report.problems


def test_a_torn_patch_is_skipped_and_cut_by_the_next_writer(tmp_path: Path) -> None:
    session = session_on(tmp_path)
    session.append_items([user("a")])
    session.append_items([user("b")])
    session.append_items([user("c")])
    log = session_dir(tmp_path) / ".head.json.log"
    whole = log.read_bytes()
    last = whole.rindex(b"\0TLOGPAT")
    log.write_bytes(whole[: last + 3])  # a crash before the last record's trailer
    assert texts(session_on(tmp_path).read_items()) == ["a", "b"]
    log.write_bytes(whole + b"\0" * 512)  # the size grew, the bytes never reached the disk
    assert texts(session_on(tmp_path).read_items()) == ["a", "b", "c"]
    log.write_bytes(whole[: last + 3])
    other = session_on(tmp_path)
    other.append_items([user("d")])  # cuts the torn record, appends its own
    assert texts(session_on(tmp_path).read_items()) == ["a", "b", "d"]
    assert log.read_bytes().count(b"\0TLOGPAT") == 2
    reader = SessionLogReader(*open_storage(f"file://{tmp_path}"))
    assert reader.verify("s").ok


def _as_if_another_process(root: Path, write: Any) -> None:
    """Run ``write`` and then forget, in this process, what it appended: as when another
    process appends (the hint of the last patch this process wrote stays where it was)."""
    logged = session_dir(root) / ".head.json.log"
    hint = dict(local_log._patched)
    ends = dict(local_log._ends)
    write()
    local_log._patched.clear()
    local_log._patched.update(hint)
    local_log._ends.clear()
    local_log._ends.update(ends)
    assert logged in local_log._patched


def test_an_append_after_another_process_appended_reads_the_tail(tmp_path: Path) -> None:
    """The journal no longer ends with this process's last patch (another one appended after
    it): the shortcut must not take that patch for the newest, or the append would overwrite
    the other process's record; it reads the tail, loses the compare-and-set, and retries."""
    session = session_on(tmp_path)
    session.append_items([user("a")])
    session.append_items([user("b")])
    _as_if_another_process(tmp_path, lambda: session_on(tmp_path).append_items([user("c")]))
    session.append_items([user("d")])
    assert texts(session_on(tmp_path).read_items()) == ["a", "b", "c", "d"]
    assert patch_count(tmp_path) == 3
    assert SessionLogReader(*open_storage(f"file://{tmp_path}")).verify("s").ok


def test_an_append_after_another_process_tore_a_record_cuts_it(tmp_path: Path) -> None:
    session = session_on(tmp_path)
    session.append_items([user("a")])
    session.append_items([user("b")])
    log = session_dir(tmp_path) / ".head.json.log"
    whole = log.read_bytes()
    _as_if_another_process(tmp_path, lambda: session_on(tmp_path).append_items([user("c")]))
    torn = log.read_bytes()
    end = whole.rstrip(b"\0")
    log.write_bytes(torn[: len(end) + 20] + bytes(len(torn) - len(end) - 20))  # a crash mid-way
    session.append_items([user("d")])
    assert texts(session_on(tmp_path).read_items()) == ["a", "b", "d"]
    assert SessionLogReader(*open_storage(f"file://{tmp_path}")).verify("s").ok


def test_an_append_after_the_head_was_replaced_reads_it_again(tmp_path: Path) -> None:
    """An operator put an older head.json back (its journal now extends other bytes): the
    shortcut sees the journal's header no longer names the head, and the append conflicts and
    starts again from the restored head instead of patching a journal nobody reads."""
    session = session_on(tmp_path)
    session.append_items([user("a")])
    head = session_dir(tmp_path) / "head.json"
    backup = head.read_bytes()
    session.append_items([user("b")])
    session.append_items([user("c")])
    head.write_bytes(backup)  # in place, as cp does; the journal stays
    session.append_items([user("d")])
    assert texts(session_on(tmp_path).read_items())[-1] == "d"
    assert SessionLogReader(*open_storage(f"file://{tmp_path}")).verify("s").ok


def test_a_damaged_patch_is_corrupt_and_named(tmp_path: Path) -> None:
    session = session_on(tmp_path)
    for text in "abcd":
        session.append_items([user(text)])
    log = session_dir(tmp_path) / ".head.json.log"
    data = bytearray(log.read_bytes())
    at = data.index(b'"content":"b"') + len(b'"content":"')
    data[at] = ord("X")  # a flipped byte inside the second record
    log.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorrupt, match=r"journal .*\.head\.json\.log is corrupt.*backup"):
        session_on(tmp_path).read_items()
    with pytest.raises(SnapshotCorrupt):
        LocalSnapshotStore(tmp_path).load(T, "s")


def test_a_build_without_journals_refuses_a_journaled_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a build from before reads: ``head.json`` alone (the journal's header is not one it
    knows, so it ignores the journal), whose envelope version it does not know: it refuses the
    head ("upgrade") instead of taking an older head for the current one."""
    session = session_on(tmp_path)
    for text in "abc":
        session.append_items([user(text)])
    head = (session_dir(tmp_path) / "head.json").read_bytes()
    assert local_log.header(head) != journal_bytes(tmp_path)[: len(local_log.header(head))]
    monkeypatch.setattr(objects, "SUPPORTED_ENVELOPE_VERSIONS", (1,))
    with pytest.raises(UnsupportedSchemaVersion, match="Upgrade Tether"):
        unseal(head, HEAD_KIND, where="head.json")


def test_a_stale_patch_conflicts_and_writes_nothing(tmp_path: Path) -> None:
    session = session_on(tmp_path)
    session.append_items([user("a")])
    session.append_items([user("b")])
    store = LocalSnapshotStore(tmp_path)
    stored = store.load_shallow(T, "s")
    assert stored is not None
    session_on(tmp_path).append_items([user("c")])  # another writer moves the head on
    before = journal_bytes(tmp_path)
    event = stored.snapshot.events[-1].model_copy(update={"seq": stored.snapshot.last_seq + 1})
    with pytest.raises(VersionConflict):
        store.append_events(T, "s", [event], updated_at_ms=1, expected_version=stored.version)
    assert journal_bytes(tmp_path) == before


def test_another_writer_is_seen_by_a_reader_that_keeps_its_last_head(tmp_path: Path) -> None:
    """A session object answers reads from the head it wrote or read last only while the
    stored version is still that one."""
    first, second = session_on(tmp_path), session_on(tmp_path)
    first.append_items([user("a")])
    first.append_items([user("b")])
    assert texts(first.read_items()) == ["a", "b"]
    assert texts(second.read_items()) == ["a", "b"]
    second.append_items([user("c")])
    assert texts(first.read_items()) == ["a", "b", "c"]
    first.append_items([user("d")])  # its live head is stale: conflict, reread, redo
    assert texts(second.read_items(limit=2)) == ["c", "d"]
    LocalSnapshotStore(tmp_path).save(
        LocalSnapshotStore(tmp_path).load(T, "s").snapshot,  # type: ignore[union-attr]
        LocalSnapshotStore(tmp_path).head_version(T, "s"),
    )  # a whole save by a worker, say: a new full version
    assert texts(first.read_items()) == ["a", "b", "c", "d"]


def test_a_full_journal_starts_over_on_a_new_object_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_log, "LOG_MAX_BYTES", 6000)
    session = session_on(tmp_path)
    sizes = []
    for n in range(3 * ARCHIVE_BATCH_EVENTS):
        session.append_items([user(f"m{n}")])
        log = session_dir(tmp_path) / ".head.json.log"
        sizes.append(len(log.read_bytes().rstrip(b"\0")) if log.exists() else 0)
    assert max(sizes) <= 6000
    assert 0 in sizes[2:]  # the journal filled, a whole head replaced the file
    assert texts(session_on(tmp_path).read_items()) == [
        f"m{n}" for n in range(3 * ARCHIVE_BATCH_EVENTS)
    ]
    assert SessionLogReader(*open_storage(f"file://{tmp_path}")).verify("s").ok


def assert_each_append_once(root: Path, writers: int, per_writer: int) -> None:
    """The session holds the seed, then every writer's items once, each writer's in order,
    and its log verifies."""
    got = texts(session_on(root).read_items())
    assert got[0] == "seed" and len(got) == 1 + writers * per_writer
    for w in range(writers):
        assert [t for t in got if t.startswith(f"w{w}-")] == [
            f"w{w}-{n}" for n in range(per_writer)
        ]
    reader = SessionLogReader(*open_storage(f"file://{root}"))
    assert reader.verify("s").ok
    assert len(reader.events("s")) == 1 + writers * per_writer


def test_racing_writers_patch_without_losing_an_item(tmp_path: Path) -> None:
    """Writers in threads, each its own store object (as processes would be): every patch is
    a compare-and-set on the journal's last record, so no append is lost or doubled."""
    session_on(tmp_path).append_items([user("seed")])
    writers, per_writer = 4, 30
    append_in_threads(
        lambda: session_on(tmp_path),
        lambda w, n: user(f"w{w}-{n}"),
        writers=writers,
        per_writer=per_writer,
    )
    assert_each_append_once(tmp_path, writers, per_writer)


def _append_as_a_process(root: str, ready: str, writer: int, writers: int, count: int) -> None:
    session = session_on(Path(root))
    (Path(ready) / str(writer)).touch()
    deadline = time.monotonic() + 60
    while len(list(Path(ready).iterdir())) < writers:  # start together, to race
        assert time.monotonic() < deadline, "the other writer processes did not start"
        time.sleep(0.001)
    for n in range(count):
        session.append_items([user(f"w{writer}-{n}")])


def test_racing_processes_patch_without_losing_an_item(tmp_path: Path) -> None:
    """Writers in processes: none knows where another's last record ended (each finds the end
    of the journal's records from the file, past the zeros the next records overwrite), and the
    compare-and-set still loses and doubles nothing."""
    root, ready = tmp_path / "store", tmp_path / "ready"
    ready.mkdir()
    session_on(root).append_items([user("seed")])
    writers, per_writer = 3, 100
    context = multiprocessing.get_context("spawn")  # no inherited state of this process
    with concurrent.futures.ProcessPoolExecutor(writers, mp_context=context) as pool:
        done = [
            pool.submit(_append_as_a_process, str(root), str(ready), w, writers, per_writer)
            for w in range(writers)
        ]
        for future in done:
            future.result(timeout=120)
    local_log._ends.clear()  # read as a process that never wrote it
    assert_each_append_once(root, writers, per_writer)


def test_the_journal_format_marks_and_folds_heads_only() -> None:
    journal = HeadJournal()
    plain = objects.seal(HEAD_KIND, b'{"x":1}')
    marked = journal.mark(plain, where="v1/t/s/head.json")
    assert journal.journaled(marked) and not journal.journaled(plain)
    assert journal.mark(marked, where="v1/t/s/head.json") == marked
    assert unseal(marked, HEAD_KIND, where="t").body == unseal(plain, HEAD_KIND, where="t").body
    with pytest.raises(SnapshotCorrupt, match=r"head at v1/t/s/head\.json .*restore head\.json"):
        journal.mark(b"not a head", where="v1/t/s/head.json")
