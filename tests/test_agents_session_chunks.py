"""#29 item 8: ``TetherSession`` appends and reads at a cost that does not grow with the session.

Older items are sealed into immutable chunks named by the head (schema version 2); the counts of
store reads here show that an append reads no chunk and that ``get_items(limit)`` reads only the
chunks holding what it returns. The event contract still holds: every write is one event, and
folding the log gives the memory the store loads whole (verify, fork and project see it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.races import append_in_threads
from tether import Agent, SessionLogReader
from tether.core.snapshot import ChunkRef
from tether.integrations.openai_agents import TetherSession, from_memory
from tether.integrations.openai_agents.chunked import CHUNK_ITEMS, INDEX_FANOUT
from tether.integrations.openai_agents.session import JOURNAL_ARCHIVE_BATCH_EVENTS
from tether.models.scripted import ScriptedModel
from tether.persistence.archives.blob import BlobEventArchive
from tether.persistence.blobs import Blob
from tether.persistence.blobs.local import LocalBlobs
from tether.persistence.blobs.memory import MemoryBlobs
from tether.persistence.journal import HeadJournal
from tether.persistence.objects import events_dir, head_key, items_dir
from tether.persistence.saving import ARCHIVE_BATCH_EVENTS
from tether.persistence.stores import BlobSnapshotStore

T = "default"


class CountingBlobs(MemoryBlobs):
    """The in-memory backend, remembering which keys were read and the bytes put per key."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []
        self.puts: list[tuple[str, int]] = []

    def get(self, key: str) -> Blob | None:
        self.reads.append(key)
        return super().get(key)

    def put(self, key: str, data: bytes, *, expected: str | None) -> str:
        self.puts.append((key, len(data)))
        return super().put(key, data, expected=expected)


class Storage:
    """A store and archive on one counting backend; ``session()`` opens a TetherSession on a
    fresh store object (an empty chunk cache, like another process)."""

    def __init__(self) -> None:
        self.blobs = CountingBlobs()

    def store(self) -> BlobSnapshotStore:
        return BlobSnapshotStore(self.blobs)

    def session(self, session_id: str = "s") -> TetherSession:
        store = self.store()
        return TetherSession(session_id, store=store, archive=BlobEventArchive(self.blobs))

    def chunk_reads(self, session_id: str = "s") -> list[str]:
        prefix = items_dir(T, session_id)
        return [key for key in self.blobs.reads if key.startswith(prefix)]

    def reader(self) -> SessionLogReader:
        return SessionLogReader(self.store(), BlobEventArchive(self.blobs))


def user(n: int) -> dict[str, Any]:
    return {"role": "user", "content": f"m{n}"}


def texts(items: list[Any]) -> list[str]:
    return [str(item["content"]) for item in items]


def test_appends_seal_chunks_and_the_head_keeps_only_the_newest_items() -> None:
    storage = Storage()
    session = storage.session()
    session.append_items([user(n) for n in range(1000)])
    for n in range(1000, 1040):
        session.append_items([user(n)])
    stored = storage.store().load_shallow(T, "s")
    assert stored is not None
    head = stored.snapshot
    assert head.schema_version == 2
    assert CHUNK_ITEMS <= len(head.memory.items) <= 2 * CHUNK_ITEMS
    refs = [ChunkRef.parse(name) for name in head.memory_chunks]
    assert [r.first for r in refs] == [n * CHUNK_ITEMS for n in range(len(refs))]
    assert {r.size for r in refs} == {CHUNK_ITEMS}
    assert head.chunked_items + len(head.memory.items) == 1040
    assert texts(storage.session().read_items()) == [f"m{n}" for n in range(1040)]


def test_one_item_appends_as_patches_still_seal_chunks(tmp_path: Path) -> None:
    """On a journaling store, appends of one item are patches of the head this object stored
    last (the shortcut of ``add_items``); the head still seals its older items into chunks as
    it grows, and the archive still takes the outbox, so the head stays small."""
    blobs = LocalBlobs(tmp_path / "store", journal=HeadJournal())
    session = TetherSession("s", store=BlobSnapshotStore(blobs), archive=BlobEventArchive(blobs))
    session.append_items([user(n) for n in range(100)])
    for n in range(100, 400):
        session.append_items([user(n)])
        stored = BlobSnapshotStore(blobs).load_shallow(T, "s")
        assert stored is not None
        assert len(stored.snapshot.memory.items) <= 2 * CHUNK_ITEMS
        # on a journal the outbox is archived with each chunk (JOURNAL_ARCHIVE_BATCH_EVENTS)
        assert len(stored.snapshot.events) <= JOURNAL_ARCHIVE_BATCH_EVENTS
    assert stored.snapshot.chunked_items + len(stored.snapshot.memory.items) == 400
    reopened = TetherSession("s", store=BlobSnapshotStore(blobs), archive=BlobEventArchive(blobs))
    assert texts(reopened.read_items()) == [f"m{n}" for n in range(400)]
    assert texts(session.read_items(limit=3)) == ["m397", "m398", "m399"]
    reader = SessionLogReader(BlobSnapshotStore(blobs), BlobEventArchive(blobs))
    assert reader.verify("s").ok


class PutLocalBlobs(LocalBlobs):
    """The local backend, remembering the keys of whole objects put (a head stored whole, a
    chunk, a segment; a patch of the head's journal is not a put)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, journal=HeadJournal())
        self.puts: list[str] = []

    def put(self, key: str, data: bytes, *, expected: str | None) -> str:
        self.puts.append(key)
        return super().put(key, data, expected=expected)


def test_one_item_appends_write_files_on_one_append_in_a_chunk(tmp_path: Path) -> None:
    """On a journaling store, the appends that write more than a patch (a chunk, a segment,
    the whole head: syncs of their own) are one per CHUNK_ITEMS, the one that seals a chunk and
    archives the outbox with it; the appends after it are patches again."""
    blobs = PutLocalBlobs(tmp_path / "store")
    session = TetherSession("s", store=BlobSnapshotStore(blobs), archive=BlobEventArchive(blobs))
    session.append_items([user(n) for n in range(1000)])
    settle = 1000 + 2 * CHUNK_ITEMS + 2  # up to the first seal, which sets the rhythm
    for n in range(1000, settle):
        session.append_items([user(n)])
    writing: list[tuple[int, bool, bool]] = []  # (append, wrote a chunk, wrote a segment)
    for n in range(settle, settle + 4 * CHUNK_ITEMS):
        blobs.puts.clear()
        session.append_items([user(n)])
        if blobs.puts:
            chunk = any(key.startswith(items_dir(T, "s")) for key in blobs.puts)
            segment = any(
                key.startswith(events_dir(T, "s")) and not key.startswith(items_dir(T, "s"))
                for key in blobs.puts
            )
            writing.append((n, chunk, segment))
    assert len(writing) == 4, writing
    assert all(chunk and segment for _, chunk, segment in writing), writing
    end = settle + 4 * CHUNK_ITEMS
    reopened = TetherSession("s", store=BlobSnapshotStore(blobs), archive=BlobEventArchive(blobs))
    assert texts(reopened.read_items()) == [f"m{n}" for n in range(end)]
    assert SessionLogReader(BlobSnapshotStore(blobs), BlobEventArchive(blobs)).verify("s").ok


def test_a_patched_append_is_read_back_redacted(tmp_path: Path) -> None:
    """Reads served from what this object appended last give the items as stored (masked)."""
    blobs = LocalBlobs(tmp_path / "store", journal=HeadJournal())
    session = TetherSession("s", store=BlobSnapshotStore(blobs), archive=BlobEventArchive(blobs))
    session.append_items([user(0)])
    session.append_items([user(1)])  # the head is now patched: the next append is the shortcut
    planted = "sk-proj-" + "Q7x" * 10
    session.append_items([{"role": "user", "content": f"my key is {planted}"}])
    reopened = TetherSession("s", store=BlobSnapshotStore(blobs), archive=BlobEventArchive(blobs))
    for reader in (session, reopened):
        assert texts(reader.read_items()) == ["m0", "m1", "my key is ***"]


def test_get_items_with_a_limit_reads_only_the_chunks_it_returns() -> None:
    storage = Storage()
    storage.session().append_items([user(n) for n in range(1000)])
    stored = storage.store().load_shallow(T, "s")
    assert stored is not None
    tail = len(stored.snapshot.memory.items)  # 1000 - 15 * 64 = 40 + 64 unsealed
    assert tail == 1000 - (1000 - CHUNK_ITEMS) // CHUNK_ITEMS * CHUNK_ITEMS
    for limit, chunks in [(20, 0), (tail, 0), (tail + 1, 1), (tail + CHUNK_ITEMS + 1, 2)]:
        storage.blobs.reads.clear()
        items = storage.session().read_items(limit)  # a fresh store: nothing cached
        assert texts(items) == [f"m{n}" for n in range(1000 - limit, 1000)]
        assert len(storage.chunk_reads()) == chunks, limit
        assert storage.blobs.reads.count(head_key(T, "s")) == 1
    storage.blobs.reads.clear()
    assert len(storage.session().read_items()) == 1000
    assert len(storage.chunk_reads()) == (1000 - CHUNK_ITEMS) // CHUNK_ITEMS


def test_an_append_reads_no_chunk_and_writes_a_head_of_bounded_size() -> None:
    """Heads written while appending to a 5,000-item and a 20,000-item session are the same
    size: an append neither reads earlier chunks nor rewrites them, and the head names only its
    newest chunks (the older ones through one chunk index)."""
    largest: dict[int, int] = {}
    for size in (5000, 20000):
        storage = Storage()
        session = storage.session()
        session.append_items([user(n) for n in range(size)])
        session.append_items([user(size)])  # the big first event leaves the head
        storage.blobs.reads.clear()
        storage.blobs.puts.clear()
        for n in range(size + 1, size + 1 + 2 * CHUNK_ITEMS):
            session.append_items([user(n)])
            stored = storage.store().load_shallow(T, "s")
            assert stored is not None
            head = stored.snapshot  # bounded whatever the size: unsealed items, names, outbox
            assert len(head.memory.items) <= 2 * CHUNK_ITEMS
            assert len(head.memory_chunks) < 2 * INDEX_FANOUT
            assert len(head.events) <= ARCHIVE_BATCH_EVENTS
        storage.blobs.reads = [key for key in storage.blobs.reads if key != head_key(T, "s")]
        assert storage.chunk_reads() == []
        head_puts = [length for key, length in storage.blobs.puts if key == head_key(T, "s")]
        assert len(head_puts) == 2 * CHUNK_ITEMS
        chunk_puts = [key for key, _ in storage.blobs.puts if key.startswith(items_dir(T, "s"))]
        assert len(chunk_puts) == 2  # one chunk per CHUNK_ITEMS appends
        largest[size] = max(head_puts)
        stored = storage.store().load_shallow(T, "s")
        assert stored is not None and stored.snapshot.memory_index is not None
        assert len(stored.snapshot.memory_chunks) < 2 * INDEX_FANOUT
    # the same bounds; the bytes differ by the item numbers' digits and where each session is
    # in its sealing and archiving cycles
    assert largest[20000] <= largest[5000] * 1.15, largest


def test_the_chunk_index_is_read_only_past_the_heads_own_chunks() -> None:
    storage = Storage()
    storage.session().append_items([user(n) for n in range(5000)])
    stored = storage.store().load_shallow(T, "s")
    assert stored is not None
    head = stored.snapshot
    assert head.memory_index is not None and len(head.memory_chunks) == INDEX_FANOUT
    own = len(head.memory.items) + INDEX_FANOUT * CHUNK_ITEMS  # items without the index
    index_key = f"{items_dir(T, 's')}{head.memory_index}.json"
    for limit, index_reads in [(own, 0), (own + 1, 1), (None, 1)]:
        storage.blobs.reads.clear()
        items = storage.session().read_items(limit)
        count = 5000 if limit is None else limit
        assert texts(items) == [f"m{n}" for n in range(5000 - count, 5000)]
        assert storage.blobs.reads.count(index_key) == index_reads
    whole = storage.store().load(T, "s")
    assert whole is not None and len(whole.snapshot.memory.items) == 5000
    # popping past the unsealed items and the head's chunks lists the index's chunks again
    session = storage.session()
    for n in range(4999, 4999 - own - 3, -1):
        popped = session.remove_last_item()
        assert popped is not None and popped["content"] == f"m{n}"
    assert texts(session.read_items()) == [f"m{n}" for n in range(5000 - own - 3)]
    assert storage.reader().verify("s").ok
    session.clear_items()
    assert session.read_items() == []


def test_the_event_contract_holds_across_chunks_pops_and_clears() -> None:
    storage = Storage()
    session = storage.session()
    session.append_items([user(n) for n in range(200)])  # 2 chunks, 72 unsealed
    expected = [f"m{n}" for n in range(200)]
    for _ in range(80):  # past the unsealed items: the last chunk comes back
        popped = session.remove_last_item()
        assert popped is not None and popped["content"] == expected.pop()
    session.append_items([user(n) for n in range(500, 700)])
    expected += [f"m{n}" for n in range(500, 700)]
    assert texts(session.read_items()) == expected
    reader = storage.reader()
    report = reader.verify("s")
    assert report.ok, report.problems
    whole = storage.store().load(T, "s")
    assert whole is not None
    assert reader.project("s") == whole.snapshot.memory
    assert [
        sdk["content"] for i in whole.snapshot.memory.items for sdk in from_memory(i)
    ] == expected
    session.clear_items()
    assert session.read_items() == []
    stored = storage.store().load_shallow(T, "s")
    assert stored is not None and stored.snapshot.memory_chunks == []
    session.append_items([user(1)])
    assert texts(session.read_items()) == ["m1"]
    assert reader.verify("s").ok


def test_a_version_1_head_is_appended_to_and_becomes_chunked() -> None:
    """A head written before chunks (all items inline) loads, and the first append seals it."""
    storage = Storage()
    agent = Agent(ScriptedModel([]), store=storage.store(), archive=BlobEventArchive(storage.blobs))
    plain = agent.new_session("s")
    from tether.integrations.openai_agents import to_memory

    plain.add_items([to_memory(user(n)) for n in range(300)])
    plain.save()
    stored = storage.store().load_shallow(T, "s")
    assert stored is not None and stored.snapshot.schema_version == 1
    session = storage.session()
    assert texts(session.read_items(limit=2)) == ["m298", "m299"]
    session.append_items([user(300)])
    stored = storage.store().load_shallow(T, "s")
    assert stored is not None and stored.snapshot.schema_version == 2
    assert texts(session.read_items()) == [f"m{n}" for n in range(301)]
    assert storage.reader().verify("s").ok


def test_fork_copies_the_whole_memory_and_outlives_its_origin() -> None:
    storage = Storage()
    session = storage.session()
    session.append_items([user(n) for n in range(300)])
    session.append_items([user(300)])
    reader = storage.reader()
    fork = reader.fork("s", "s-fork")
    assert fork.memory_chunks == [] and len(fork.memory.items) == 301
    assert storage.store().delete(T, "s") is True
    assert storage.blobs.list_names(items_dir(T, "s")) == []
    assert texts(storage.session("s-fork").read_items()) == [f"m{n}" for n in range(301)]
    assert reader.verify("s-fork").ok


@pytest.mark.parametrize("backend", ["local", "local-journal"])
def test_concurrent_writers_sealing_chunks_lose_no_item(backend: str, tmp_path: Path) -> None:
    """Writers in threads, each its own store object (as processes would be), on a local store
    (with a journal: appends between seals are patches): the compare-and-set still detects
    every race while chunks are being sealed."""
    journal = HeadJournal() if backend == "local-journal" else None
    blobs = LocalBlobs(tmp_path / "store", journal=journal)

    def open_session() -> TetherSession:
        return TetherSession("s", store=BlobSnapshotStore(blobs), archive=BlobEventArchive(blobs))

    open_session().append_items([user(n) for n in range(120)])  # just below the sealing point
    writers, per_writer = 4, 12
    append_in_threads(
        open_session,
        lambda w, n: user(1000 * (w + 1) + n),
        writers=writers,
        per_writer=per_writer,
    )
    got = texts(open_session().read_items())
    assert got[:120] == [f"m{n}" for n in range(120)]
    for w in range(writers):  # every writer's items, each in its own order
        mine = [t for t in got[120:] if t.startswith(f"m{1000 * (w + 1) // 1000}")]
        assert mine == [f"m{1000 * (w + 1) + n}" for n in range(per_writer)]
    assert len(got) == 120 + writers * per_writer
    reader = SessionLogReader(BlobSnapshotStore(blobs), BlobEventArchive(blobs))
    assert reader.verify("s").ok


def test_a_writer_starts_from_the_head_it_saved_and_rereads_after_another_writer() -> None:
    """The head an object saved is where its next write starts (no read back); when another
    writer saved since, the compare-and-set refuses it and the write is redone on the stored
    head, so nothing is lost either way."""
    storage = Storage()
    first, second = storage.session(), storage.session()
    first.append_items([user(n) for n in range(150)])
    storage.blobs.reads.clear()
    first.append_items([user(150)])
    assert storage.blobs.reads.count(head_key(T, "s")) == 0  # nothing read back
    second.append_items([user(151)])  # never wrote: reads the store
    storage.blobs.reads.clear()
    first.append_items([user(152)])  # its kept head is stale now: conflict, reread, redo
    assert storage.blobs.reads.count(head_key(T, "s")) == 1
    for n in range(153, 160):
        (first if n % 2 else second).append_items([user(n)])
    assert texts(storage.session().read_items()) == [f"m{n}" for n in range(160)]
    assert storage.reader().verify("s").ok


def test_a_store_without_journals_reads_the_head_every_time() -> None:
    """Only a store that reads a head's version without parsing it answers reads from the head
    a session wrote last; on any other, another writer's items are seen at once."""
    storage = Storage()
    first, second = storage.session(), storage.session()
    first.append_items([user(0)])
    second.append_items([user(1)])
    assert texts(first.read_items()) == ["m0", "m1"]
    first.append_items([user(2)])
    second.append_items([user(3)])
    assert texts(first.read_items(limit=2)) == ["m2", "m3"]


def test_a_large_append_leaves_no_outbox_in_the_head_it_is_read_through() -> None:
    """A session filled by one large ``add_items`` (an imported history, say) does not keep that
    event in its head until the next write: the event is archived and the head written again
    without it, so ``get_items(limit=20)`` reads a head of the same size as after small appends,
    and the log still folds to the memory."""
    storage = Storage()
    storage.session().append_items([user(n) for n in range(5000)])
    stored = storage.store().load_shallow(T, "s")
    assert stored is not None
    head = stored.snapshot
    assert head.events == []
    assert head.archived_seq == head.last_seq
    head_puts = [length for key, length in storage.blobs.puts if key == head_key(T, "s")]
    big, last = max(head_puts), head_puts[-1]
    assert last * 20 < big  # the first write carried 5,000 items in its event; the last none
    small = Storage()
    small.session().append_items([user(n) for n in range(2 * CHUNK_ITEMS)])
    small_head = [length for key, length in small.blobs.puts if key == head_key(T, "s")][-1]
    assert last <= 2 * small_head
    storage.blobs.reads.clear()
    assert texts(storage.session().read_items(20)) == [f"m{n}" for n in range(4980, 5000)]
    assert storage.chunk_reads() == []
    reader = storage.reader()
    report = reader.verify("s")
    assert report.ok, report.problems
    assert [e.seq for e in reader.events("s")] == list(range(1, head.last_seq + 1))
