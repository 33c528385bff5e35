"""The EventArchive contract, run against every implementation (memory, local, S3 on moto)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from tests.support.moto_server import S3TestBucket
from tests.support.protocols import assert_conforms
from tests.support.storage_samples import sample_events
from tether.core.events import AgentEvent, EventType, TextPayload
from tether.errors import (
    InvalidId,
    InvalidInput,
    SnapshotCorrupt,
    StoreUnavailable,
    UnsupportedSchemaVersion,
    VersionConflict,
)
from tether.persistence.archives import (
    BlobEventArchive,
    InMemoryEventArchive,
    LocalEventArchive,
    S3EventArchive,
)
from tether.persistence.archives.base import EventArchive
from tether.persistence.codec import dumps_events
from tether.persistence.objects import SEGMENT_KIND, events_dir, seal, segment_name

S3_PREFIX = "apps/tether"
UNREACHABLE_ENDPOINT = "http://127.0.0.1:9"
BAD_IDS: list[object] = [
    "",
    "../x",
    "a/b",
    "x" * 300,
    "a\x00b",
    "a\uff0fb",
    "\u0430dmin",
    ".hidden",
    7,
]


@dataclass
class ArchiveCase:
    """An archive under test plus raw access to its objects, bypassing the archive."""

    kind: str
    archive: BlobEventArchive
    raw_read: Callable[[str], bytes]
    raw_write: Callable[[str, bytes], None]
    location: Callable[[str], list[str]]


def _memory_case() -> ArchiveCase:
    archive = InMemoryEventArchive()

    def raw_write(key: str, data: bytes) -> None:
        current = archive.blobs.get(key)
        archive.blobs.put(key, data, expected=None if current is None else current.token)

    def raw_read(key: str) -> bytes:
        blob = archive.blobs.get(key)
        assert blob is not None
        return blob.data

    return ArchiveCase("memory", archive, raw_read, raw_write, lambda key: [f"memory://{key}"])


def _local_case(root: Path) -> ArchiveCase:
    def raw_write(key: str, data: bytes) -> None:
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    return ArchiveCase(
        "local",
        LocalEventArchive(root),
        lambda key: (root / key).read_bytes(),
        raw_write,
        lambda key: [str(root / key)],
    )


def _s3_case(bucket: S3TestBucket) -> ArchiveCase:
    archive = S3EventArchive(
        bucket.bucket,
        S3_PREFIX,
        endpoint_url=bucket.endpoint_url,
        aws_access_key_id=bucket.access_key_id,
        aws_secret_access_key=bucket.secret_access_key,
    )
    client = bucket.client()

    def raw_read(key: str) -> bytes:
        return client.get_object(Bucket=bucket.bucket, Key=f"{S3_PREFIX}/{key}")["Body"].read()

    def raw_write(key: str, data: bytes) -> None:
        client.put_object(Bucket=bucket.bucket, Key=f"{S3_PREFIX}/{key}", Body=data)

    return ArchiveCase(
        "s3", archive, raw_read, raw_write, lambda key: [bucket.bucket, f"{S3_PREFIX}/{key}"]
    )


@pytest.fixture(params=["memory", "local", "s3"])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> ArchiveCase:
    if request.param == "memory":
        return _memory_case()
    if request.param == "local":
        return _local_case(tmp_path / "archive")
    return _s3_case(request.getfixturevalue("s3_bucket"))


def events(
    first: int, count: int, session_id: str = "s-1", tenant: str = "acme"
) -> list[AgentEvent]:
    """``count`` sample events of ``session_id`` from seq ``first``."""
    return sample_events(session_id, tenant, first_seq=first, count=count)


def _key(first: int, last: int, session_id: str = "s-1") -> str:
    return events_dir("acme", session_id) + segment_name(first, last)


def test_implements_the_protocol(case: ArchiveCase) -> None:
    assert_conforms(case.archive, EventArchive)  # every method, with the Protocol's parameters


def test_empty_archive(case: ArchiveCase) -> None:
    assert case.archive.read("acme", "s-1") == []
    assert case.archive.last_seq("acme", "s-1") == 0
    assert case.archive.delete_session("acme", "s-1") == 0


def test_segments_read_back_in_order_whatever_the_write_order(case: ArchiveCase) -> None:
    everything = events(1, 8)
    case.archive.write_segment("acme", "s-1", everything[3:6])
    case.archive.write_segment("acme", "s-1", everything[0:3])
    case.archive.write_segment("acme", "s-1", everything[6:8])

    assert case.archive.read("acme", "s-1") == everything
    assert case.archive.last_seq("acme", "s-1") == 8


@pytest.mark.parametrize(
    ("after_seq", "expected"), [(0, 1), (2, 3), (3, 4), (4, 5), (8, 9), (99, 9)]
)
def test_read_after_seq(case: ArchiveCase, after_seq: int, expected: int) -> None:
    everything = events(1, 8)
    for chunk in (everything[0:3], everything[3:6], everything[6:8]):
        case.archive.write_segment("acme", "s-1", chunk)

    assert [e.seq for e in case.archive.read("acme", "s-1", after_seq=after_seq)] == list(
        range(expected, 9)
    )


def test_segment_object_is_a_checksummed_envelope(case: ArchiveCase) -> None:
    batch = events(1, 3)
    case.archive.write_segment("acme", "s-1", batch)

    document = json.loads(case.raw_read("v1/acme/s-1/events/" + segment_name(1, 3)))

    assert (document["tether"], document["envelope"]) == ("segment", 1)
    assert (document["first_seq"], document["last_seq"], document["count"]) == (1, 3, 3)
    assert document["body"] == json.loads(dumps_events(batch))


def test_identical_rewrite_is_a_no_op(case: ArchiveCase) -> None:
    batch = events(1, 3)
    case.archive.write_segment("acme", "s-1", batch)
    case.archive.write_segment("acme", "s-1", list(batch))

    assert case.archive.read("acme", "s-1") == batch
    assert case.archive.blobs.list_names(events_dir("acme", "s-1")) == [segment_name(1, 3)]


def test_conflicting_rewrite_is_rejected_and_the_segment_kept(case: ArchiveCase) -> None:
    original = events(1, 3)
    case.archive.write_segment("acme", "s-1", original)
    different = [e.model_copy(update={"payload": TextPayload(text="other")}) for e in original]

    with pytest.raises(VersionConflict, match="different events") as caught:
        case.archive.write_segment("acme", "s-1", different)

    assert case.archive.read("acme", "s-1") == original
    for part in case.location(_key(1, 3)):
        assert part in str(caught.value)
    if case.kind == "s3":  # the create was refused by S3 itself (If-None-Match: *)
        cause = caught.value.__cause__
        assert isinstance(cause, VersionConflict)
        assert isinstance(cause.__cause__, ClientError)
        assert cause.__cause__.response["ResponseMetadata"]["HTTPStatusCode"] == 412


@pytest.mark.parametrize(
    ("first_range", "second_range", "problem"),
    [((1, 3), (5, 6), "a gap"), ((1, 3), (3, 5), "an overlap"), ((1, 3), (1, 5), "an overlap")],
)
def test_gaps_and_overlaps_are_reported(
    case: ArchiveCase, first_range: tuple[int, int], second_range: tuple[int, int], problem: str
) -> None:
    for first, last in (first_range, second_range):
        case.archive.write_segment("acme", "s-1", events(first, last - first + 1))

    with pytest.raises(SnapshotCorrupt, match=problem) as caught:
        case.archive.read("acme", "s-1")
    assert segment_name(*first_range) in str(caught.value)
    with pytest.raises(SnapshotCorrupt, match=problem):
        case.archive.last_seq("acme", "s-1")
    # A broken archive can still be deleted.
    assert case.archive.delete_session("acme", "s-1") == 2
    assert case.archive.read("acme", "s-1") == []


def test_delete_session_only_touches_that_session(case: ArchiveCase) -> None:
    case.archive.write_segment("acme", "s-1", events(1, 2))
    case.archive.write_segment("acme", "s-1", events(3, 2))
    case.archive.write_segment("acme", "s-2", events(1, 2, "s-2"))
    case.archive.write_segment("acme-eu", "s-1", events(1, 1, tenant="acme-eu"))

    assert case.archive.delete_session("acme", "s-1") == 2
    assert case.archive.read("acme", "s-1") == []
    assert case.archive.last_seq("acme", "s-1") == 0
    assert case.archive.last_seq("acme", "s-2") == 2
    assert case.archive.read("acme-eu", "s-1") == events(1, 1, tenant="acme-eu")


def test_events_must_be_contiguous_and_belong_to_the_session(case: ArchiveCase) -> None:
    batch = events(1, 3)
    with pytest.raises(InvalidInput, match="empty"):
        case.archive.write_segment("acme", "s-1", [])
    with pytest.raises(InvalidInput, match="contiguous"):
        case.archive.write_segment("acme", "s-1", [batch[0], batch[2]])
    with pytest.raises(InvalidInput, match=">= 1"):
        case.archive.write_segment("acme", "s-1", [batch[0].with_seq(0)])
    with pytest.raises(InvalidInput, match="not to tenant"):
        case.archive.write_segment("acme", "s-2", batch)
    with pytest.raises(InvalidInput, match="not to tenant"):
        case.archive.write_segment("other", "s-1", batch)
    with pytest.raises(InvalidInput, match="after_seq"):
        case.archive.read("acme", "s-1", after_seq=-1)
    assert case.archive.last_seq("acme", "s-1") == 0


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_invalid_ids_are_refused(case: ArchiveCase, bad: object) -> None:
    _assert_every_method_refuses(case.archive, bad)


def _assert_every_method_refuses(archive: BlobEventArchive, bad: object) -> None:
    batch = [AgentEvent(type=EventType.STEP_START, tenant="acme", session_id=None, seq=1)]
    calls: list[Callable[[], object]] = [
        lambda: archive.write_segment("acme", bad, batch),  # type: ignore[arg-type]
        lambda: archive.write_segment(bad, "s-1", batch),  # type: ignore[arg-type]
        lambda: archive.read("acme", bad),  # type: ignore[arg-type]
        lambda: archive.read(bad, "s-1"),  # type: ignore[arg-type]
        lambda: archive.last_seq("acme", bad),  # type: ignore[arg-type]
        lambda: archive.delete_session(bad, "s-1"),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(InvalidId):
            call()


def test_invalid_ids_are_refused_before_any_io(tmp_path: Path) -> None:
    local = LocalEventArchive(tmp_path / "never-created")
    remote = S3EventArchive(
        "tether-test",
        endpoint_url=UNREACHABLE_ENDPOINT,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        max_attempts=1,
    )
    for bad in BAD_IDS:
        _assert_every_method_refuses(local, bad)
        _assert_every_method_refuses(remote, bad)

    assert not (tmp_path / "never-created").exists()
    with pytest.raises(StoreUnavailable) as caught:  # a valid id does reach for the network
        remote.last_seq("acme", "s-1")
    assert isinstance(caught.value.__cause__, EndpointConnectionError)


def _flip_byte(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x20]) + data[index + 1 :]


def test_corrupt_segment_names_its_location(case: ArchiveCase) -> None:
    case.archive.write_segment("acme", "s-1", events(1, 3))
    key = _key(1, 3)
    raw = case.raw_read(key)
    case.raw_write(key, _flip_byte(raw, len(raw) - 40))

    with pytest.raises(SnapshotCorrupt, match="checksum") as caught:
        case.archive.read("acme", "s-1")
    for part in case.location(key):
        assert part in str(caught.value)
    with pytest.raises(SnapshotCorrupt):  # not silently overwritten either
        case.archive.write_segment("acme", "s-1", events(1, 3))


def test_segment_whose_content_does_not_match_its_name_is_corrupt(case: ArchiveCase) -> None:
    body = dumps_events(events(1, 3))
    case.raw_write(_key(1, 4), seal(SEGMENT_KIND, body, first_seq=1, last_seq=4, count=3))

    with pytest.raises(SnapshotCorrupt, match=r"seq 1\.\.4"):
        case.archive.read("acme", "s-1")


def test_unknown_event_version_is_reported(case: ArchiveCase) -> None:
    document = json.loads(dumps_events(events(1, 1)))
    document[0]["v"] = 99
    body = json.dumps(document).encode()
    case.raw_write(_key(1, 1), seal(SEGMENT_KIND, body, first_seq=1, last_seq=1, count=1))

    with pytest.raises(UnsupportedSchemaVersion, match="99"):
        case.archive.read("acme", "s-1")
