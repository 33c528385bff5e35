"""open_storage: one URL names both the snapshot store and the event archive."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.moto_server import S3TestBucket
from tests.support.storage_samples import sample_events, sample_snapshot
from tether.errors import ConfigurationError
from tether.persistence.archives import InMemoryEventArchive, LocalEventArchive, S3EventArchive
from tether.persistence.storage_url import ACCEPTED_FORMS, open_storage
from tether.persistence.stores import InMemorySnapshotStore, LocalSnapshotStore, S3SnapshotStore


def test_memory_url() -> None:
    store, archive = open_storage("memory://")

    assert isinstance(store, InMemorySnapshotStore)
    assert isinstance(archive, InMemoryEventArchive)
    store.save(sample_snapshot("s-1"), None)
    assert store.load("default", "s-1") is not None


def test_file_url_puts_heads_and_segments_under_one_root(tmp_path: Path) -> None:
    store, archive = open_storage(tmp_path.as_uri())

    assert isinstance(store, LocalSnapshotStore) and isinstance(archive, LocalEventArchive)
    assert store.root == archive.root == str(tmp_path)
    store.save(sample_snapshot("s-1"), None)
    archive.write_segment("default", "s-1", sample_events("s-1", count=2))
    session_dir = tmp_path / "v1" / "default" / "s-1"
    assert (session_dir / "head.json").is_file()
    assert [p.name for p in (session_dir / "events").glob("*.json")] == [
        "00000000000000000001-00000000000000000002.json"
    ]
    assert store.list_session_ids("default") == ["s-1"]


def test_file_url_decodes_percent_escapes(tmp_path: Path) -> None:
    store, _ = open_storage(f"file://{tmp_path}/with%20space")
    assert isinstance(store, LocalSnapshotStore)
    assert store.root == f"{tmp_path}/with space"


def test_s3_url_round_trip(s3_bucket: S3TestBucket) -> None:
    store, archive = open_storage(
        f"s3://{s3_bucket.bucket}/team/prod/",
        endpoint_url=s3_bucket.endpoint_url,
        aws_access_key_id=s3_bucket.access_key_id,
        aws_secret_access_key=s3_bucket.secret_access_key,
    )

    assert isinstance(store, S3SnapshotStore) and isinstance(archive, S3EventArchive)
    assert store.blobs is archive.blobs  # one validated configuration, one client
    assert (store.blobs.bucket, store.blobs.prefix) == (s3_bucket.bucket, "team/prod")
    store.save(sample_snapshot("s-1"), None)
    archive.write_segment("default", "s-1", sample_events("s-1", count=3))
    keys = [
        obj["Key"]
        for obj in s3_bucket.client().list_objects_v2(Bucket=s3_bucket.bucket)["Contents"]
    ]
    assert sorted(keys) == [
        "team/prod/v1/default/s-1/events/00000000000000000001-00000000000000000003.json",
        "team/prod/v1/default/s-1/head.json",
    ]
    assert [e.seq for e in archive.read("default", "s-1")] == [1, 2, 3]


def test_s3_url_without_prefix() -> None:
    store, _ = open_storage("s3://my-bucket")
    assert isinstance(store, S3SnapshotStore)
    assert (store.blobs.bucket, store.blobs.prefix) == ("my-bucket", "")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("", "no scheme"),
        ("/var/tether", "no scheme"),
        ("ftp://host/path", "unknown scheme 'ftp'"),
        ("memory://name", "takes no name"),
        ("file://relative/path", "host 'relative'"),
        ("file:relative", "absolute directory path"),
        ("file:///", "absolute directory path"),
        ("s3://", "bucket name is missing"),
        ("s3://Bad_Bucket/x", "bucket name 'Bad_Bucket' is not valid"),
        ("s3://bucket/a/../b", "prefix"),
        ("s3://bucket:9000/x", "not in the URL"),
        ("s3://bucket/x?region=eu", "query strings"),
    ],
)
def test_bad_urls_name_the_url_and_the_accepted_forms(url: str, reason: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        open_storage(url)

    message = str(caught.value)
    assert repr(url) in message
    assert reason in message
    assert ACCEPTED_FORMS in message


def test_credentials_in_a_url_are_refused_without_being_echoed() -> None:
    with pytest.raises(ConfigurationError) as caught:
        open_storage("s3://AKIDEXAMPLE:s3cr3t@bucket/prefix")

    message = str(caught.value)
    assert "s3cr3t" not in message and "AKIDEXAMPLE" not in message
    assert "s3://***@bucket/prefix" in message


def test_bad_encryption_setting_names_the_url() -> None:
    with pytest.raises(ConfigurationError, match=r"s3://bucket/p.*AES256"):
        open_storage("s3://bucket/p", sse="DES")  # type: ignore[arg-type]


def test_empty_encryption_settings_mean_not_configured() -> None:
    store, _ = open_storage("s3://bucket/p", sse="", sse_kms_key_id="")  # type: ignore[arg-type]
    assert isinstance(store, S3SnapshotStore)
