"""The local stack's S3 store (``tether up --s3``): a moto server, kept across ``down`` / ``up``.

moto holds its objects in the server process's memory, while the stack's Redis keeps its run
records on disk (append-only file): a store lost on ``down`` left ``tether wait`` answering from
a record whose session ``tether sessions show`` no longer found, and the next run remembered
nothing. So ``tether down`` saves the bucket to ``.tether/s3/<bucket>/`` (one file per object,
written beside the old copy and swapped in whole) before it stops moto, and ``tether up --s3``
puts every saved object back before any worker starts. A moto that died without ``down`` saved
nothing since the last ``down``; ``down`` says so.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

S3_BUCKET = "tether"
#: moto's fixed development credentials (moto accepts any).
MOTO_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=MOTO_ENV["AWS_DEFAULT_REGION"],
        aws_access_key_id=MOTO_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=MOTO_ENV["AWS_SECRET_ACCESS_KEY"],
    )


def create_bucket(endpoint: str) -> None:
    """Create the stack's bucket (it may exist)."""
    client = _client(endpoint)
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=S3_BUCKET)


def _safe_key(key: str) -> bool:
    """Whether ``key`` maps to a file under the save directory (Tether's keys always do)."""
    parts = key.split("/")
    return bool(key) and not key.startswith("/") and ".." not in parts and "" not in parts


def save_bucket(endpoint: str, directory: Path) -> int:
    """Save every object of the bucket under ``directory/<bucket>/`` (replacing what was saved
    before only once all are written); returns how many were saved."""
    client = _client(endpoint)
    staging = directory.with_name(directory.name + ".saving")
    shutil.rmtree(staging, ignore_errors=True)
    count = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET):
        for item in page.get("Contents", []):
            key = item["Key"]
            if not _safe_key(key):
                continue
            target = staging / S3_BUCKET / key
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(client.get_object(Bucket=S3_BUCKET, Key=key)["Body"].read())
            count += 1
    (staging / S3_BUCKET).mkdir(parents=True, exist_ok=True)
    old = directory.with_name(directory.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if directory.exists():
        directory.rename(old)
    staging.rename(directory)
    shutil.rmtree(old, ignore_errors=True)
    return count


def restore_bucket(endpoint: str, directory: Path) -> int:
    """Put every object saved under ``directory/<bucket>/`` back; returns how many."""
    root = directory / S3_BUCKET
    if not root.is_dir():
        return 0
    client = _client(endpoint)
    count = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        key = path.relative_to(root).as_posix()
        client.put_object(
            Bucket=S3_BUCKET, Key=key, Body=path.read_bytes(), ContentType="application/json"
        )
        count += 1
    return count
