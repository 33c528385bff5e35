"""The snapshot store on S3: ``<prefix>/v1/<tenant>/<session>/head.json``."""

from __future__ import annotations

from typing import Unpack

from tether.persistence.blobs.s3 import S3Blobs, S3Options
from tether.persistence.stores.blob import BlobSnapshotStore


class S3SnapshotStore(BlobSnapshotStore):
    """Heads as S3 objects; compare-and-set with conditional writes, versions are ETags.

    See :class:`tether.persistence.blobs.s3.S3Blobs` for the arguments.
    """

    blobs: S3Blobs

    def __init__(self, bucket: str, prefix: str = "", **options: Unpack[S3Options]) -> None:
        super().__init__(S3Blobs(bucket, prefix, **options))

    @classmethod
    def sharing(cls, blobs: S3Blobs) -> S3SnapshotStore:
        """An instance over an existing backend (same bucket, prefix and client)."""
        instance = cls.__new__(cls)
        BlobSnapshotStore.__init__(instance, blobs)
        return instance
