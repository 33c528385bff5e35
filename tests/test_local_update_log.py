"""The local backend's update log: an update of a small existing object is one appended record
(one sync, like SQLite's write-ahead log) instead of a replaced file (two), and reads, the
compare-and-set, deletes and recovery from a torn append behave as with replaced files."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.support.storage_samples import sample_snapshot
from tether.core.items import UserMessage
from tether.core.memory import MemorySnapshot
from tether.errors import VersionConflict
from tether.persistence.blobs import local_log
from tether.persistence.blobs.local import LocalBlobs
from tether.persistence.codec import loads_snapshot, sha256_hex
from tether.persistence.objects import unseal
from tether.persistence.stores import LocalSnapshotStore

KEY = "v1/acme/s-1/head.json"


def files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "v1" / "acme" / "s-1").iterdir())


def versions(blobs: LocalBlobs, count: int) -> str:
    """Write ``count`` versions (create + updates); return the last token."""
    token = blobs.put(KEY, b'{"v":0}', expected=None)
    for n in range(1, count):
        token = blobs.put(KEY, b'{"v":%d}' % n, expected=token)
    return token


def test_updates_are_appended_and_read_back_with_their_tokens(tmp_path: Path) -> None:
    blobs = LocalBlobs(tmp_path, update_log=True)
    token = versions(blobs, 5)
    assert token == sha256_hex(b'{"v":4}')
    assert files(tmp_path) == [".head.json.log", ".lock", "head.json"]
    assert (tmp_path / KEY).read_bytes() == b'{"v":0}'  # the file: the base of the log
    blob = blobs.get(KEY)
    assert blob is not None and blob.data == b'{"v":4}' and blob.token == token
    # a backend that does not log (the default) reads the same, and its update replaces the file
    plain = LocalBlobs(tmp_path)
    assert plain.get(KEY) == blob
    with pytest.raises(VersionConflict):
        plain.put(KEY, b'{"v":9}', expected=sha256_hex(b'{"v":3}'))
    token = plain.put(KEY, b'{"v":5}', expected=token)
    assert files(tmp_path) == [".lock", "head.json"]
    assert blobs.get(KEY) == (b'{"v":5}', token)
    assert blobs.list_names("v1/acme/s-1/") == ["head.json"]  # the log never lists


def test_a_stale_version_conflicts_and_changes_nothing(tmp_path: Path) -> None:
    blobs = LocalBlobs(tmp_path, update_log=True)
    versions(blobs, 3)
    log_before = (tmp_path / "v1/acme/s-1/.head.json.log").read_bytes()
    with pytest.raises(VersionConflict):
        blobs.put(KEY, b'{"v":"late"}', expected=sha256_hex(b'{"v":1}'))
    with pytest.raises(VersionConflict):
        blobs.put(KEY, b'{"v":"new"}', expected=None)
    assert (tmp_path / "v1/acme/s-1/.head.json.log").read_bytes() == log_before
    assert blobs.get(KEY) == (b'{"v":2}', sha256_hex(b'{"v":2}'))


def test_a_replaced_file_outranks_its_old_log(tmp_path: Path) -> None:
    """An operator copies a head back from a backup: the log extends other bytes and is
    ignored (it is not applied on top of the restored file)."""
    blobs = LocalBlobs(tmp_path, update_log=True)
    versions(blobs, 4)
    (tmp_path / KEY).write_bytes(b'{"v":"restored"}')
    assert blobs.get(KEY) == (b'{"v":"restored"}', sha256_hex(b'{"v":"restored"}'))
    token = blobs.put(KEY, b'{"v":"next"}', expected=sha256_hex(b'{"v":"restored"}'))
    assert blobs.get(KEY) == (b'{"v":"next"}', token)


def test_writing_the_base_bytes_again_drops_the_log(tmp_path: Path) -> None:
    blobs = LocalBlobs(tmp_path, update_log=True)
    token = versions(blobs, 3)
    token = blobs.put(KEY, b'{"v":0}', expected=token)
    assert files(tmp_path) == [".lock", "head.json"]
    assert blobs.get(KEY) == (b'{"v":0}', token)


def test_a_torn_append_is_skipped_by_readers_and_cut_by_the_next_writer(tmp_path: Path) -> None:
    blobs = LocalBlobs(tmp_path, update_log=True)
    token = versions(blobs, 3)
    log = tmp_path / "v1/acme/s-1/.head.json.log"
    whole = log.read_bytes()
    content = whole.rstrip(b"\0")  # the records; the zeros after them are room for the next
    log.write_bytes(whole + b"\0" * 4096)  # the size grew, the data never reached the disk
    assert blobs.get(KEY) == (b'{"v":2}', token)
    torn = local_log.record(b'{"v":"torn"}')[:-5]  # a crash before the trailer was written
    log.write_bytes(content + torn + b"\0" * 64)
    assert blobs.get(KEY) == (b'{"v":2}', token)
    token = blobs.put(KEY, b'{"v":3}', expected=token)
    # the torn record cut, the new one written with the room after it
    assert log.read_bytes() == content + local_log.record(b'{"v":3}') + bytes(local_log.PAD_BYTES)
    assert blobs.get(KEY) == (b'{"v":3}', token)


def test_appends_fill_the_room_after_the_last_record_before_growing_the_file(
    tmp_path: Path,
) -> None:
    """A record that grows the log leaves zeros after it; the next ones overwrite them, so
    their sync commits no new file size. Readers that never saw this log (another process)
    find where its records stop."""
    blobs = LocalBlobs(tmp_path, update_log=True)
    token = versions(blobs, 2)
    log = tmp_path / "v1/acme/s-1/.head.json.log"
    size = log.stat().st_size
    for n in range(2, 6):
        token = blobs.put(KEY, b'{"v":%d}' % n, expected=token)
        assert log.stat().st_size == size
    assert log.read_bytes().rstrip(b"\0").endswith(local_log.record(b'{"v":5}'))
    local_log._ends.clear()  # what another process knows of this log: nothing
    assert LocalBlobs(tmp_path, update_log=True).get(KEY) == (b'{"v":5}', token)
    record = len(local_log.record(b'{"v":9}'))
    for n in range(6, 6 + local_log.PAD_BYTES // record + 2):
        token = blobs.put(KEY, b'{"v":%d}' % n, expected=token)
    assert log.stat().st_size > size  # the room ran out: one record grew the file again
    local_log._ends.clear()
    assert blobs.get(KEY) == (b'{"v":%d}' % n, token)


def test_where_this_process_saw_a_log_end_is_checked_before_it_is_used(tmp_path: Path) -> None:
    blobs = LocalBlobs(tmp_path, update_log=True)
    token = versions(blobs, 3)
    log = tmp_path / "v1/acme/s-1/.head.json.log"
    content = log.read_bytes().rstrip(b"\0")
    earlier = content.rindex(b"\0TLOGREC", 0, len(content) - 1) + len(b"\0TLOGREC")
    token = blobs.put(KEY, b'{"v":3}', expected=token)
    # another process appended since this one saw the log end at the record before
    for stale in (earlier, len(content), earlier - 3, 10**9):
        local_log._ends[local_log.log_path(tmp_path / KEY)] = stale
        assert blobs.get(KEY) == (b'{"v":3}', token)
        local_log._ends[local_log.log_path(tmp_path / KEY)] = stale
        with pytest.raises(VersionConflict):
            blobs.put(KEY, b'{"v":"lost"}', expected=sha256_hex(b'{"v":2}'))


def test_a_log_without_room_from_an_earlier_build_is_read_and_appended_to(
    tmp_path: Path,
) -> None:
    blobs = LocalBlobs(tmp_path, update_log=True)
    token = versions(blobs, 3)
    log = tmp_path / "v1/acme/s-1/.head.json.log"
    log.write_bytes(log.read_bytes().rstrip(b"\0"))  # as builds before the room wrote it
    local_log._ends.clear()
    assert blobs.get(KEY) == (b'{"v":2}', token)
    token = blobs.put(KEY, b'{"v":3}', expected=token)
    assert log.read_bytes().endswith(local_log.record(b'{"v":3}') + bytes(local_log.PAD_BYTES))
    local_log._ends.clear()
    assert blobs.get(KEY) == (b'{"v":3}', token)


def test_a_full_log_is_folded_into_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_log, "LOG_MAX_BYTES", 400)
    blobs = LocalBlobs(tmp_path, update_log=True)
    token = blobs.put(KEY, b"x" * 10, expected=None)
    sizes = []
    for n in range(12):
        token = blobs.put(KEY, b"%02d" % n + b"y" * 60, expected=token)
        log = tmp_path / "v1/acme/s-1/.head.json.log"
        sizes.append(len(log.read_bytes().rstrip(b"\0")) if log.exists() else 0)
        assert blobs.get(KEY) == (b"%02d" % n + b"y" * 60, token)
    assert max(sizes) <= 400
    assert 0 in sizes  # at least one update replaced the file and dropped the log


def test_large_objects_are_replaced_not_logged(tmp_path: Path) -> None:
    blobs = LocalBlobs(tmp_path, update_log=True)
    big = b"z" * (local_log.LOG_MAX_RECORD_BYTES + 1)
    token = blobs.put(KEY, b"small", expected=None)
    token = blobs.put(KEY, big, expected=token)
    assert files(tmp_path) == [".lock", "head.json"]
    token = blobs.put(KEY, b"small again", expected=token)  # the file is big: replace it
    assert files(tmp_path) == [".lock", "head.json"]
    token = blobs.put(KEY, b"logged", expected=token)
    assert files(tmp_path) == [".head.json.log", ".lock", "head.json"]
    assert blobs.get(KEY) == (b"logged", token)


def test_delete_removes_the_log(tmp_path: Path) -> None:
    blobs = LocalBlobs(tmp_path, update_log=True)
    versions(blobs, 3)
    assert blobs.delete(KEY) is True
    assert files(tmp_path) == [".lock"]
    assert blobs.get(KEY) is None
    blobs.put(KEY, b'{"v":2}', expected=None)  # the old log's last version, as a new object
    assert blobs.get(KEY) == (b'{"v":2}', sha256_hex(b'{"v":2}'))


def test_racing_writers_lose_no_update(tmp_path: Path) -> None:
    """Each thread its own backend (as processes would be): read, increment, compare-and-set."""
    LocalBlobs(tmp_path, update_log=True).put(KEY, b"0", expected=None)
    writers, rounds = 4, 25

    def increment() -> None:
        blobs = LocalBlobs(tmp_path, update_log=True)
        done = 0
        while done < rounds:
            blob = blobs.get(KEY)
            assert blob is not None
            try:
                blobs.put(KEY, b"%d" % (int(blob.data) + 1), expected=blob.token)
                done += 1
            except VersionConflict:
                pass

    threads = [threading.Thread(target=increment) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    blob = LocalBlobs(tmp_path, update_log=True).get(KEY)
    assert blob is not None and int(blob.data) == writers * rounds


def test_the_default_store_logs_only_chunked_heads_on_a_chunked_file(tmp_path: Path) -> None:
    """Without ``update_log`` only a head of schema version 2 replacing one of version 2 goes
    to the log: whenever a log exists, ``head.json`` is a head that builds from before chunks
    refuse ("upgrade Tether"), never an older head they would take for the current one."""
    store = LocalSnapshotStore(tmp_path)
    session_dir = tmp_path / "v1" / "acme" / "s-1"
    v1 = sample_snapshot("s-1", "acme")
    version = store.save(v1, None)
    version = store.save(v1.model_copy(update={"last_seq": v1.last_seq + 1}), version)
    assert not (session_dir / ".head.json.log").exists()  # version 1: the file is replaced
    chunk = store.write_chunk("acme", "s-1", 0, (UserMessage(content="old"),))
    v2 = v1.model_copy(
        update={"memory_chunks": [chunk], "schema_version": 2, "memory": MemorySnapshot()}
    )
    for n in range(3):
        version = store.save(v2.model_copy(update={"last_seq": v1.last_seq + 2 + n}), version)
        # the first version-2 head replaces the version-1 file; the next ones are logged
        assert (session_dir / ".head.json.log").exists() == (n > 0)
        on_disk = unseal((session_dir / "head.json").read_bytes(), "head", where="test")
        assert loads_snapshot(on_disk.body).schema_version == 2
    loaded = store.load_shallow("acme", "s-1")
    assert loaded is not None and loaded.snapshot.last_seq == v1.last_seq + 4
    assert loaded.version == version
    # back to version 1 (a clear, a worker's run): the file is replaced and the log dropped
    store.save(v1.model_copy(update={"last_seq": v1.last_seq + 5}), version)
    assert not (session_dir / ".head.json.log").exists()
