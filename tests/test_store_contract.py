"""The SnapshotStore contract, run against every implementation (memory, local, S3 on moto)."""

from __future__ import annotations

import functools
import json
import multiprocessing
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from tests.support.cas_worker import increment_counter
from tests.support.moto_server import S3TestBucket
from tests.support.protocols import assert_conforms
from tests.support.storage_samples import sample_events, sample_snapshot
from tether.core.items import UserMessage
from tether.core.memory import MemorySnapshot
from tether.core.snapshot import SessionSnapshot
from tether.errors import (
    InvalidId,
    InvalidInput,
    SnapshotCorrupt,
    StoreUnavailable,
    UnsupportedSchemaVersion,
    VersionConflict,
)
from tether.persistence.archives.blob import BlobEventArchive
from tether.persistence.codec import dumps_snapshot
from tether.persistence.objects import HEAD_KIND, head_key, listing_order, seal
from tether.persistence.stores import (
    BlobSnapshotStore,
    InMemorySnapshotStore,
    LocalSnapshotStore,
    S3SnapshotStore,
)
from tether.persistence.stores.base import SnapshotStore, iter_session_ids

S3_PREFIX = "apps/tether"
UNREACHABLE_ENDPOINT = "http://127.0.0.1:9"  # the discard port: connection refused at once

BAD_IDS: list[object] = [
    "",
    "../x",
    "a/b",
    "..",
    ".hidden",
    "x" * 300,
    "a\x00b",
    "a b",
    "a\nb",
    "a\uff0fb",  # fullwidth solidus
    "a\u2215b",  # division slash
    "\u0430dmin",  # Cyrillic a
    "sessi\u043en",  # Cyrillic o
    "caf\u00e9",
    42,
]


@dataclass
class StoreCase:
    """A store under test plus raw access to its bytes, bypassing the store."""

    kind: str
    store: BlobSnapshotStore
    raw_read: Callable[[str], bytes]
    raw_write: Callable[[str, bytes], None]
    location: Callable[[str], list[str]]
    """The substrings an error about a key must contain."""


def _memory_case() -> StoreCase:
    store = InMemorySnapshotStore()

    def raw_write(key: str, data: bytes) -> None:
        current = store.blobs.get(key)
        store.blobs.put(key, data, expected=None if current is None else current.token)

    def raw_read(key: str) -> bytes:
        blob = store.blobs.get(key)
        assert blob is not None
        return blob.data

    return StoreCase("memory", store, raw_read, raw_write, lambda key: [f"memory://{key}"])


def _local_case(root: Path) -> StoreCase:
    store = LocalSnapshotStore(root)

    def raw_write(key: str, data: bytes) -> None:
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    return StoreCase(
        "local",
        store,
        lambda key: (root / key).read_bytes(),
        raw_write,
        lambda key: [str(root / key)],
    )


def _s3_store(bucket: S3TestBucket) -> S3SnapshotStore:
    """A store that builds its own client from the endpoint (the production path)."""
    return S3SnapshotStore(
        bucket.bucket,
        S3_PREFIX,
        endpoint_url=bucket.endpoint_url,
        region_name=bucket.region,
        aws_access_key_id=bucket.access_key_id,
        aws_secret_access_key=bucket.secret_access_key,
    )


def _s3_case(bucket: S3TestBucket) -> StoreCase:
    store = _s3_store(bucket)
    client = bucket.client()

    def raw_read(key: str) -> bytes:
        return client.get_object(Bucket=bucket.bucket, Key=f"{S3_PREFIX}/{key}")["Body"].read()

    def raw_write(key: str, data: bytes) -> None:
        client.put_object(Bucket=bucket.bucket, Key=f"{S3_PREFIX}/{key}", Body=data)

    return StoreCase(
        "s3", store, raw_read, raw_write, lambda key: [bucket.bucket, f"{S3_PREFIX}/{key}"]
    )


@pytest.fixture(params=["memory", "local", "s3"])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> StoreCase:
    if request.param == "memory":
        return _memory_case()
    if request.param == "local":
        return _local_case(tmp_path / "store")
    return _s3_case(request.getfixturevalue("s3_bucket"))


def _with_attribute(snapshot: SessionSnapshot, name: str, value: str) -> SessionSnapshot:
    copy = snapshot.copy_deep()
    copy.metadata.attributes[name] = value
    return copy


# --- round trip -------------------------------------------------------------------------------


def test_implements_the_protocol(case: StoreCase) -> None:
    assert_conforms(case.store, SnapshotStore)  # every method, with the Protocol's parameters


def test_round_trip_keeps_every_field(case: StoreCase) -> None:
    original = sample_snapshot("s-1", "acme")
    assert {item.type for item in original.memory.items} == {
        "user_message",
        "assistant_message",
        "tool_calls",
        "tool_output",
        "reasoning",
    }

    version = case.store.save(original, None)
    stored = case.store.load("acme", "s-1")

    assert stored is not None
    assert stored.version == version
    assert stored.snapshot == original
    assert dumps_snapshot(stored.snapshot) == dumps_snapshot(original)
    assert stored.snapshot.metadata.attributes["limits"] == {"max_steps": 8}
    assert len(stored.snapshot.events) == 8


def test_loaded_and_saved_objects_are_independent_of_the_store(case: StoreCase) -> None:
    original = sample_snapshot("s-1")
    case.store.save(original, None)
    original.metadata.attributes["user"] = "changed after save"

    first = case.store.load("default", "s-1")
    assert first is not None
    first.snapshot.metadata.attributes["user"] = "changed after load"
    second = case.store.load("default", "s-1")

    assert second is not None
    assert second.snapshot.metadata.attributes["user"] == "u-42"
    assert second.snapshot is not first.snapshot


def test_load_of_a_missing_session_is_none(case: StoreCase) -> None:
    assert case.store.load("acme", "nope") is None


def test_head_is_a_checksummed_json_envelope_at_the_documented_key(case: StoreCase) -> None:
    snapshot = sample_snapshot("s-1", "acme")
    case.store.save(snapshot, None)

    raw = case.raw_read("v1/acme/s-1/head.json")
    document = json.loads(raw)

    assert document["tether"] == "head"
    assert document["envelope"] == 1
    assert document["body"] == snapshot.to_json_dict()
    assert len(document["sha256"]) == 64


# --- compare-and-set --------------------------------------------------------------------------


def test_create_refuses_an_existing_session_and_changes_nothing(case: StoreCase) -> None:
    first = sample_snapshot("s-1")
    version = case.store.save(first, None)

    with pytest.raises(VersionConflict):
        case.store.save(_with_attribute(first, "user", "intruder"), None)

    stored = case.store.load("default", "s-1")
    assert stored is not None
    assert stored.version == version
    assert stored.snapshot == first


def test_update_with_the_current_version_wins(case: StoreCase) -> None:
    v1 = case.store.save(sample_snapshot("s-1"), None)
    updated = _with_attribute(sample_snapshot("s-1"), "user", "u-43")

    v2 = case.store.save(updated, v1)

    assert v2 != v1
    stored = case.store.load("default", "s-1")
    assert stored is not None
    assert (stored.snapshot, stored.version) == (updated, v2)


def test_stale_version_is_rejected_and_the_head_is_unchanged(case: StoreCase) -> None:
    # Two sequential saves against the same expected version: on S3 the second one is
    # refused by the server with 412 PreconditionFailed (If-Match), deterministically.
    base = sample_snapshot("s-1")
    v1 = case.store.save(base, None)
    winner = _with_attribute(base, "user", "winner")
    v2 = case.store.save(winner, v1)

    with pytest.raises(VersionConflict) as caught:
        case.store.save(_with_attribute(base, "user", "loser"), v1)

    stored = case.store.load("default", "s-1")
    assert stored is not None
    assert (stored.snapshot, stored.version) == (winner, v2)
    if case.kind == "s3":
        cause = caught.value.__cause__
        assert isinstance(cause, ClientError)
        assert cause.response["ResponseMetadata"]["HTTPStatusCode"] == 412


def test_update_of_a_missing_session_conflicts(case: StoreCase) -> None:
    version = case.store.save(sample_snapshot("s-1"), None)
    assert case.store.delete("default", "s-1")

    with pytest.raises(VersionConflict):
        case.store.save(sample_snapshot("s-1"), version)
    with pytest.raises(VersionConflict):
        case.store.save(sample_snapshot("s-2"), "some-version")
    assert case.store.load("default", "s-1") is None


def test_expected_version_must_be_a_string(case: StoreCase) -> None:
    with pytest.raises(InvalidInput):
        case.store.save(sample_snapshot("s-1"), 3)  # type: ignore[arg-type]


# --- delete and listing -----------------------------------------------------------------------


def test_delete(case: StoreCase) -> None:
    case.store.save(sample_snapshot("s-1"), None)
    case.store.save(sample_snapshot("s-2"), None)

    assert case.store.delete("default", "s-1") is True
    assert case.store.delete("default", "s-1") is False
    assert case.store.load("default", "s-1") is None
    assert case.store.list_session_ids("default") == ["s-2"]
    case.store.save(sample_snapshot("s-1"), None)  # can be created again
    assert case.store.list_session_ids("default") == ["s-1", "s-2"]


def test_listing_pages_in_key_order_and_isolates_tenants(case: StoreCase) -> None:
    # "a-b" and "a.c" sort before "a" in key order ('-' and '.' sort before '/').
    ids = ["b", "a", "a-b", "a.c", "a0", "A", "z:9", "m_1"]
    for session_id in ids:
        case.store.save(sample_snapshot(session_id, "acme"), None)
    case.store.save(sample_snapshot("other", "acme-eu"), None)
    case.store.save(sample_snapshot("x", "acm"), None)
    # A session with archived events but no head is not a session of the store.
    BlobEventArchive(case.store.blobs).write_segment(
        "acme", "ghost", sample_events("ghost", "acme", count=2)
    )

    expected = sorted(ids, key=listing_order)
    pages = _pages(case.store, "acme", 3)

    assert [sid for page in pages for sid in page] == expected
    assert [len(page) for page in pages] == [3, 3, 2]
    assert iter_session_ids(case.store, "acme", page_size=2) == expected
    assert case.store.list_session_ids("acme", after="a", limit=2) == ["a0", "b"]
    assert case.store.list_session_ids("acme", after="zz") == []
    assert case.store.list_session_ids("acme-eu") == ["other"]
    assert case.store.list_session_ids("acm") == ["x"]
    assert case.store.list_session_ids("nobody") == []


def _pages(store: BlobSnapshotStore, tenant: str, limit: int) -> list[list[str]]:
    """Every page of ``tenant``'s session ids, ``limit`` at a time, as a caller walks them."""
    pages: list[list[str]] = []
    after: str | None = None
    while True:
        page = store.list_session_ids(tenant, after=after, limit=limit)
        pages.append(page)
        if len(page) < limit:
            return pages
        after = page[-1]


def test_a_name_that_is_no_session_id_is_skipped_and_paging_goes_past_it(
    case: StoreCase, caplog: pytest.LogCaptureFixture
) -> None:
    # an object put beside the sessions by hand (or by a tenant that may write its prefix):
    # listing raised InvalidId on it, which stopped the console's sessions page and a purge
    ids = ["a", "b", "c", "d"]
    for sid in ids:
        case.store.save(sample_snapshot(sid, "acme"), None)
    head = case.raw_read(head_key("acme", "b"))
    for stray in ("b x", "b..c", "bz\u00e9"):  # between b and c, as the backends order names
        case.raw_write(f"{head_key('acme', 'b').rsplit('/', 2)[0]}/{stray}/head.json", head)

    pages = _pages(case.store, "acme", 2)

    assert [sid for page in pages for sid in page] == ids
    assert iter_session_ids(case.store, "acme", page_size=1) == ids
    assert case.store.list_session_ids("acme") == ids
    assert "not a session id" in caplog.text


@pytest.mark.parametrize("limit", [0, -1, True])
def test_listing_rejects_a_bad_limit(case: StoreCase, limit: int) -> None:
    with pytest.raises(InvalidInput):
        case.store.list_session_ids("acme", limit=limit)


# --- validation before I/O --------------------------------------------------------------------


def _assert_every_method_refuses(store: BlobSnapshotStore, bad: object) -> None:
    def snapshot_with(session_id: object, tenant: object) -> SessionSnapshot:
        snapshot = sample_snapshot()
        # Metadata accepts any string; the store must be the one refusing it.
        return snapshot.model_copy(
            update={
                "metadata": snapshot.metadata.model_copy(
                    update={"session_id": session_id, "tenant": tenant}
                )
            }
        )

    calls: list[Callable[[], object]] = [
        lambda: store.load("acme", bad),  # type: ignore[arg-type]
        lambda: store.load(bad, "s-1"),  # type: ignore[arg-type]
        lambda: store.save(snapshot_with(bad, "acme"), None),
        lambda: store.save(snapshot_with("s-1", bad), "v"),
        lambda: store.delete("acme", bad),  # type: ignore[arg-type]
        lambda: store.delete(bad, "s-1"),  # type: ignore[arg-type]
        lambda: store.list_session_ids(bad),  # type: ignore[arg-type]
        lambda: store.list_session_ids("acme", after=bad),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(InvalidId):
            call()


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_invalid_ids_are_refused(case: StoreCase, bad: object) -> None:
    _assert_every_method_refuses(case.store, bad)


def test_invalid_ids_do_no_local_io(tmp_path: Path) -> None:
    root = tmp_path / "never-created"
    store = LocalSnapshotStore(root)
    for bad in BAD_IDS:
        _assert_every_method_refuses(store, bad)
    assert not root.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_invalid_ids_are_refused_before_contacting_s3() -> None:
    store = S3SnapshotStore(
        "tether-test",
        endpoint_url=UNREACHABLE_ENDPOINT,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        max_attempts=1,
        connect_timeout_s=1.0,
    )
    for bad in BAD_IDS:
        _assert_every_method_refuses(store, bad)

    # The same store with a valid id does reach for the network (and fails): the refusals
    # above happened before any I/O.
    with pytest.raises(StoreUnavailable) as caught:
        store.load("acme", "s-1")
    assert isinstance(caught.value.__cause__, EndpointConnectionError)
    assert "s3://tether-test/v1/acme/s-1/head.json" in str(caught.value)


# --- damaged data -----------------------------------------------------------------------------


def _flip_byte(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x20]) + data[index + 1 :]


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "wrong_length"])
def test_corrupt_head_names_its_location(case: StoreCase, damage: str) -> None:
    case.store.save(sample_snapshot("s-1", "acme"), None)
    key = head_key("acme", "s-1")
    raw = case.raw_read(key)
    damaged: dict[str, bytes] = {
        "flip": _flip_byte(raw, len(raw) // 2),
        "truncate": raw[: len(raw) // 2],
        "garbage": b"\x00\xffnot json at all",
        "wrong_length": raw.replace(b'"bytes":', b'"bytes":1', 1),
    }
    case.raw_write(key, damaged[damage])

    with pytest.raises(SnapshotCorrupt) as caught:
        case.store.load("acme", "s-1")

    message = str(caught.value)
    for part in case.location(key):
        assert part in message
    assert "To recover" in message


def test_head_under_another_sessions_key_is_corrupt(case: StoreCase) -> None:
    case.store.save(sample_snapshot("s-1", "acme"), None)
    case.raw_write(head_key("acme", "s-2"), case.raw_read(head_key("acme", "s-1")))

    with pytest.raises(SnapshotCorrupt, match="'s-1'"):
        case.store.load("acme", "s-2")


def test_unknown_schema_version_is_reported_not_parsed(case: StoreCase) -> None:
    document = sample_snapshot("s-1", "acme").to_json_dict()
    document["schema_version"] = 99
    case.raw_write(head_key("acme", "s-1"), seal(HEAD_KIND, json.dumps(document).encode()))

    with pytest.raises(UnsupportedSchemaVersion, match="99"):
        case.store.load("acme", "s-1")


def test_unknown_envelope_version_is_reported(case: StoreCase) -> None:
    sealed = seal(HEAD_KIND, dumps_snapshot(sample_snapshot("s-1", "acme")))
    case.raw_write(head_key("acme", "s-1"), sealed.replace(b'"envelope":1', b'"envelope":7', 1))

    with pytest.raises(UnsupportedSchemaVersion, match="envelope=7"):
        case.store.load("acme", "s-1")


# --- concurrency ------------------------------------------------------------------------------


def _save_variant(
    store: SnapshotStore, base: SessionSnapshot, label: str, expected: str | None, index: int
) -> str:
    return store.save(_with_attribute(base, "writer", f"{label}{index}"), expected)


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_racing_threads_produce_exactly_one_winner_per_round(kind: str, tmp_path: Path) -> None:
    store: BlobSnapshotStore = (
        InMemorySnapshotStore() if kind == "memory" else LocalSnapshotStore(tmp_path)
    )
    threads_n = 8

    def race(attempt: Callable[[int], str]) -> dict[int, str]:
        barrier = threading.Barrier(threads_n)
        winners: dict[int, str] = {}
        errors: list[BaseException] = []

        def run(index: int) -> None:
            barrier.wait()
            try:
                winners[index] = attempt(index)
            except VersionConflict:
                pass
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(threads_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert not errors, errors
        return winners

    for round_index in range(5):
        session_id = f"race-{round_index}"
        base = sample_snapshot(session_id)
        created = race(functools.partial(_save_variant, store, base, "c", None))
        assert len(created) == 1, created
        ((creator, version),) = created.items()

        updated = race(functools.partial(_save_variant, store, base, "u", version))
        assert len(updated) == 1, updated
        ((updater, new_version),) = updated.items()

        stored = store.load("default", session_id)
        assert stored is not None
        assert stored.version == new_version
        assert stored.snapshot.metadata.attributes["writer"] == f"u{updater}"
        assert creator in range(threads_n)


def test_processes_never_lose_an_update_on_the_local_store(tmp_path: Path) -> None:
    store = LocalSnapshotStore(tmp_path)
    store.save(sample_snapshot("shared", attributes={"counter": 0}), None)
    processes, times = 3, 15

    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        results = [
            pool.apply_async(increment_counter, (str(tmp_path), "default", "shared", times))
            for _ in range(processes)
        ]
        conflicts = [result.get(timeout=60) for result in results]

    stored = store.load("default", "shared")
    assert stored is not None
    assert stored.snapshot.metadata.attributes["counter"] == processes * times
    assert all(isinstance(n, int) for n in conflicts)


# --- backend specifics ------------------------------------------------------------------------


def test_local_layout_and_no_leftover_temp_files(tmp_path: Path) -> None:
    store = LocalSnapshotStore(tmp_path)
    version = store.save(sample_snapshot("s-1", "acme"), None)
    store.save(sample_snapshot("s-1", "acme"), version)

    session_dir = tmp_path / "v1" / "acme" / "s-1"
    assert sorted(p.name for p in session_dir.iterdir()) == [".lock", "head.json"]
    assert store.root == str(tmp_path)


def test_s3_round_trips_a_10_mb_snapshot(s3_bucket: S3TestBucket) -> None:
    store = _s3_store(s3_bucket)
    chunk = "0123456789abcdef" * 65_536  # 1 MiB of text
    big = sample_snapshot("big").model_copy(
        update={
            "memory": MemorySnapshot(
                items=tuple(UserMessage(content=f"{i}:{chunk}") for i in range(10)),
                summary="ten big messages",
            )
        }
    )

    version = store.save(big, None)
    stored = store.load("default", "big")

    assert stored is not None
    assert stored.version == version
    assert stored.snapshot == big
    assert len(dumps_snapshot(stored.snapshot)) > 10 * 1024 * 1024


def test_s3_server_side_encryption_is_requested(s3_bucket: S3TestBucket) -> None:
    client = s3_bucket.client()
    aes = S3SnapshotStore(s3_bucket.bucket, "aes", sse="AES256", client=client)
    kms = S3SnapshotStore(
        s3_bucket.bucket, "kms", sse="aws:kms", sse_kms_key_id="alias/tether", client=client
    )
    aes.save(sample_snapshot("s-1"), None)
    kms.save(sample_snapshot("s-1"), None)

    aes_head = client.head_object(Bucket=s3_bucket.bucket, Key="aes/v1/default/s-1/head.json")
    kms_head = client.head_object(Bucket=s3_bucket.bucket, Key="kms/v1/default/s-1/head.json")
    assert aes_head["ServerSideEncryption"] == "AES256"
    assert kms_head["ServerSideEncryption"] == "aws:kms"
    assert kms_head["SSEKMSKeyId"].endswith("alias/tether")


def test_s3_missing_bucket_is_a_configuration_error(s3_bucket: S3TestBucket) -> None:
    from tether.errors import ConfigurationError

    store = S3SnapshotStore(
        "no-such-bucket",
        endpoint_url=s3_bucket.endpoint_url,
        aws_access_key_id=s3_bucket.access_key_id,
        aws_secret_access_key=s3_bucket.secret_access_key,
    )
    with pytest.raises(ConfigurationError, match="no-such-bucket"):
        store.save(sample_snapshot("s-1"), None)


def test_s3_repr_and_errors_never_show_credentials() -> None:
    store = S3SnapshotStore(
        "tether-test",
        endpoint_url=UNREACHABLE_ENDPOINT,
        aws_access_key_id="AKIDSECRETVALUE",
        aws_secret_access_key="very-secret-key",
        max_attempts=1,
    )
    with pytest.raises(StoreUnavailable) as caught:
        store.list_session_ids("acme")
    for text in (repr(store.blobs), str(caught.value)):
        assert "very-secret-key" not in text
        assert "AKIDSECRETVALUE" not in text


def _load_in_forked_child(store: S3SnapshotStore, parent_client: object, conn: Connection) -> None:
    stored = store.load("default", "s-1")
    conn.send((store.blobs.client is parent_client, None if stored is None else stored.version))


def test_s3_client_is_not_shared_with_a_forked_child(s3_bucket: S3TestBucket) -> None:
    # Celery's prefork pool forks workers: a child must not reuse the parent's HTTP pool.
    store = _s3_store(s3_bucket)
    version = store.save(sample_snapshot("s-1"), None)
    parent_client = store.blobs.client

    receiver, sender = multiprocessing.get_context("fork").Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(
        target=_load_in_forked_child, args=(store, parent_client, sender)
    )
    child.start()
    assert receiver.poll(30), "the forked child did not answer"
    same_client, child_version = receiver.recv()
    child.join(timeout=30)

    assert child.exitcode == 0
    assert (same_client, child_version) == (False, version)
    assert store.blobs.client is parent_client  # the parent keeps its own
