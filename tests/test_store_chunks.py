"""Memory chunks (heads of schema version 2) on every store: memory, local directory, S3 on moto.

A chunked head names immutable, content-addressed chunks of older memory items; ``load_shallow``
returns it as stored, every other load materializes it into a version-1 value, so the readers and
workers that do not know chunks see the whole memory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.moto_server import S3TestBucket
from tests.support.storage_samples import sample_snapshot
from tether.core.items import Item, UserMessage
from tether.core.memory import MemorySnapshot
from tether.core.snapshot import ChunkRef, SessionSnapshot
from tether.errors import SnapshotCorrupt, UnsupportedSchemaVersion, VersionConflict
from tether.persistence.codec import dumps_snapshot, loads_snapshot
from tether.persistence.objects import chunk_key, head_key, items_dir
from tether.persistence.stores import (
    BlobSnapshotStore,
    InMemorySnapshotStore,
    LocalSnapshotStore,
    S3SnapshotStore,
)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(params=["memory", "local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> BlobSnapshotStore:
    if request.param == "memory":
        return InMemorySnapshotStore()
    if request.param == "local":
        return LocalSnapshotStore(tmp_path / "store")
    bucket: S3TestBucket = request.getfixturevalue("s3_bucket")
    return S3SnapshotStore(bucket.bucket, "chunks", client=bucket.client())


def messages(start: int, count: int) -> tuple[Item, ...]:
    return tuple(UserMessage(content=f"m{n}") for n in range(start, start + count))


def chunked_head(store: BlobSnapshotStore, session_id: str = "s-1") -> SessionSnapshot:
    """A version-2 head: items m0..m9 in two chunks, m10..m11 unsealed."""
    names = [
        store.write_chunk("acme", session_id, 0, messages(0, 6)),
        store.write_chunk("acme", session_id, 6, messages(6, 4)),
    ]
    head = sample_snapshot(session_id, "acme")
    return head.model_copy(
        update={
            "memory": MemorySnapshot(items=messages(10, 2), summary="so far"),
            "memory_chunks": names,
            "schema_version": 2,
        }
    )


def test_a_chunked_head_round_trips_shallow_and_loads_whole(store: BlobSnapshotStore) -> None:
    head = chunked_head(store)
    version = store.save(head, None)

    shallow = store.load_shallow("acme", "s-1")
    assert shallow is not None and shallow.version == version
    assert shallow.snapshot == head
    assert [ChunkRef.parse(n)[:2] for n in shallow.snapshot.memory_chunks] == [(0, 6), (6, 4)]
    assert shallow.snapshot.chunked_items == 10

    whole = store.load("acme", "s-1")
    assert whole is not None and whole.version == version
    assert whole.snapshot.memory == MemorySnapshot(items=messages(0, 12), summary="so far")
    assert whole.snapshot.memory_chunks == [] and whole.snapshot.schema_version == 1
    # the rest of the head is untouched by materializing
    rest = {"memory", "memory_chunks", "schema_version"}
    assert whole.snapshot.model_dump(exclude=rest) == head.model_dump(exclude=rest)


def test_a_chunk_is_content_addressed_and_written_once(store: BlobSnapshotStore) -> None:
    first = store.write_chunk("acme", "s-1", 0, messages(0, 3))
    again = store.write_chunk("acme", "s-1", 0, messages(0, 3))  # a retried writer: no conflict
    other = store.write_chunk("acme", "s-1", 0, messages(5, 3))
    assert first == again != other
    assert ChunkRef.parse(first).first == 0 and ChunkRef.parse(first).size == 3
    fresh = type(store).__new__(type(store))
    BlobSnapshotStore.__init__(fresh, store.blobs)  # an empty chunk cache: read from storage
    assert fresh.read_chunk("acme", "s-1", first) == messages(0, 3)
    assert fresh.read_chunk("acme", "s-1", other) == messages(5, 3)


def test_a_missing_or_altered_chunk_is_corrupt_and_named(store: BlobSnapshotStore) -> None:
    head = chunked_head(store)
    store.save(head, None)
    name = head.memory_chunks[1]
    key = chunk_key("acme", "s-1", name)
    fresh = type(store).__new__(type(store))
    BlobSnapshotStore.__init__(fresh, store.blobs)
    # another chunk's bytes under this name: the checksum holds, the name does not match
    blob = store.blobs.get(chunk_key("acme", "s-1", head.memory_chunks[0]))
    assert blob is not None
    current = store.blobs.get(key)
    assert current is not None
    store.blobs.put(key, blob.data, expected=current.token)
    with pytest.raises(SnapshotCorrupt, match=f"memory chunk at .*{name}.*does not match its name"):
        fresh.load("acme", "s-1")
    store.blobs.delete(key)
    with pytest.raises(SnapshotCorrupt, match=f"memory chunk at .*{name}.*missing"):
        fresh.load("acme", "s-1")
    # the shallow load does not read chunks, so the head itself is still there to repair
    assert fresh.load_shallow("acme", "s-1") is not None


def test_delete_removes_the_chunks_with_the_head(store: BlobSnapshotStore) -> None:
    store.save(chunked_head(store, "s-1"), None)
    store.save(chunked_head(store, "s-2"), None)
    assert len(store.blobs.list_names(items_dir("acme", "s-1"))) == 2
    assert store.delete("acme", "s-1") is True
    assert store.blobs.list_names(items_dir("acme", "s-1")) == []
    assert store.load("acme", "s-1") is None
    assert len(store.blobs.list_names(items_dir("acme", "s-2"))) == 2  # others untouched
    assert store.load("acme", "s-2") is not None
    assert store.list_session_ids("acme") == ["s-2"]  # chunks never list as sessions


def test_a_stale_writer_of_a_chunked_head_conflicts(store: BlobSnapshotStore) -> None:
    head = chunked_head(store)
    version = store.save(head, None)
    newer = head.model_copy(update={"last_seq": head.last_seq + 1})
    store.save(newer, version)
    with pytest.raises(VersionConflict):
        store.save(head.model_copy(update={"last_seq": head.last_seq + 2}), version)
    loaded = store.load_shallow("acme", "s-1")
    assert loaded is not None and loaded.snapshot.last_seq == head.last_seq + 1


def test_version_1_heads_are_written_and_read_as_before() -> None:
    """A head without chunks stays version 1, field for field the golden fixture (plus the
    additive fields written since), so releases before chunks read it; the golden version-1
    head still loads."""
    raw = (FIXTURES / "snapshot_v1.json").read_bytes()
    snapshot = loads_snapshot(raw)
    assert snapshot.schema_version == 1 and snapshot.memory_chunks == []
    additive = {"archive_batch_events": 0, "writer_fence": 0}
    assert json.loads(dumps_snapshot(snapshot)) == {**json.loads(raw), **additive}
    assert b"memory_chunks" not in dumps_snapshot(snapshot)
    store = InMemorySnapshotStore()
    store.save(snapshot, None)
    shallow = store.load_shallow(snapshot.tenant, snapshot.session_id)
    assert shallow is not None and shallow.snapshot == snapshot


def test_a_version_2_head_needs_chunks_and_version_1_refuses_them() -> None:
    head = chunked_head(InMemorySnapshotStore())
    data = dumps_snapshot(head)
    assert json.loads(data)["schema_version"] == 2
    doc = json.loads(data)
    doc["schema_version"] = 1  # chunks in a version-1 head: a reader would miss items
    with pytest.raises(SnapshotCorrupt, match="version 2 heads have chunks"):
        loads_snapshot(json.dumps(doc))
    doc["schema_version"] = 3
    with pytest.raises(UnsupportedSchemaVersion, match=r"versions \[1, 2\]"):
        loads_snapshot(json.dumps(doc))


def test_load_memory_reads_the_memory_alone(store: BlobSnapshotStore) -> None:
    assert store.load_memory("acme", "s-1") is None
    head = chunked_head(store)
    store.save(head, None)
    memory = store.load_memory("acme", "s-1")
    assert memory is not None
    assert tuple(reversed(list(memory.newest_items()))) == head.memory.items
    assert memory.memory.summary == head.memory.summary
    assert memory.memory_chunks == head.memory_chunks
    assert memory.schema_version == 2
    plain = sample_snapshot("s-2", "acme")
    store.save(plain, None)
    memory = store.load_memory("acme", "s-2")
    assert memory is not None and memory.memory_chunks == []
    assert tuple(reversed(list(memory.newest_items()))) == plain.memory.items
    # the same check as a whole load: another session's head under this key is corrupt
    other = store.blobs.get(head_key("acme", "s-2"))
    assert other is not None
    store.blobs.put(head_key("acme", "s-3"), other.data, expected=None)
    with pytest.raises(SnapshotCorrupt, match="session 's-2'"):
        store.load_memory("acme", "s-3")


def test_a_chunk_index_names_the_oldest_chunks(store: BlobSnapshotStore) -> None:
    names = [store.write_chunk("acme", "s-1", 4 * n, messages(4 * n, 4)) for n in range(5)]
    index = store.write_chunk_index("acme", "s-1", names[:3])
    assert index.startswith("i000000000012-3-")  # 12 items in 3 chunks
    assert store.write_chunk_index("acme", "s-1", names[:3]) == index  # content-addressed
    head = sample_snapshot("s-1", "acme").model_copy(
        update={
            "memory": MemorySnapshot(items=messages(20, 1)),
            "memory_chunks": names[3:],
            "memory_index": index,
            "schema_version": 2,
        }
    )
    assert head.chunked_items == 20
    store.save(head, None)
    fresh = type(store).__new__(type(store))
    BlobSnapshotStore.__init__(fresh, store.blobs)
    assert fresh.chunk_names("acme", "s-1", index) == tuple(names[:3])
    whole = fresh.load("acme", "s-1")
    assert whole is not None and whole.snapshot.memory.items == messages(0, 21)
    assert whole.snapshot.memory_index is None and whole.snapshot.schema_version == 1
    # an index holding other names than its own name says is corrupt
    key = chunk_key("acme", "s-1", index)
    other = store.blobs.get(chunk_key("acme", "s-1", names[0]))
    current = store.blobs.get(key)
    assert other is not None and current is not None
    store.blobs.put(key, other.data, expected=current.token)
    fresh = type(store).__new__(type(store))
    BlobSnapshotStore.__init__(fresh, store.blobs)
    with pytest.raises(SnapshotCorrupt, match=f"memory chunk index at .*{index}"):
        fresh.load("acme", "s-1")
    assert store.delete("acme", "s-1") is True
    assert store.blobs.list_names(items_dir("acme", "s-1")) == []


def test_a_bad_item_in_a_head_read_for_its_memory_is_corrupt_and_named() -> None:
    """``load_memory`` validates items only as a reader reaches them; one that does not match
    the schema is still reported as corrupt data, naming the session."""
    from tether.persistence.codec import newest_head_items

    store = InMemorySnapshotStore()
    store.save(sample_snapshot("s-1", "acme"), None)
    head = store.load_memory("acme", "s-1")
    assert head is not None
    head.memory.items.append({"type": "no-such-item"})
    items = newest_head_items(head, where="acme/s-1")
    with pytest.raises(SnapshotCorrupt, match="acme/s-1"):
        next(items)
