"""The event archive on S3: ``<prefix>/v1/<tenant>/<session>/events/<first>-<last>.json``."""

from __future__ import annotations

from typing import Unpack

from tether.persistence.archives.blob import BlobEventArchive
from tether.persistence.blobs.s3 import S3Blobs, S3Options


class S3EventArchive(BlobEventArchive):
    """Segments as S3 objects, created with ``If-None-Match: *``.

    It may share its bucket and prefix with a
    :class:`tether.persistence.stores.s3.S3SnapshotStore`. See
    :class:`tether.persistence.blobs.s3.S3Blobs` for the arguments.
    """

    blobs: S3Blobs

    def __init__(self, bucket: str, prefix: str = "", **options: Unpack[S3Options]) -> None:
        super().__init__(S3Blobs(bucket, prefix, **options))

    @classmethod
    def sharing(cls, blobs: S3Blobs) -> S3EventArchive:
        """An instance over an existing backend (same bucket, prefix and client)."""
        instance = cls.__new__(cls)
        BlobEventArchive.__init__(instance, blobs)
        return instance
