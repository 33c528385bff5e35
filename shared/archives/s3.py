"""The event archive on S3: ``<prefix>/v1/<tenant>/<session>/events/<first>-<last>.json``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.archives.base import BlobEventArchive
from shared.blobs.s3 import S3Blobs, SseMode

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


class S3EventArchive(BlobEventArchive):
    """Segments as S3 objects, created with ``If-None-Match: *``.

    It may share its bucket and prefix with a :class:`shared.stores.s3.S3SnapshotStore`. See
    :class:`shared.blobs.s3.S3Blobs` for the arguments.
    """

    blobs: S3Blobs

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: S3Client | None = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        sse: SseMode | None = None,
        sse_kms_key_id: str | None = None,
        max_attempts: int = 5,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(
            S3Blobs(
                bucket,
                prefix,
                client=client,
                endpoint_url=endpoint_url,
                region_name=region_name,
                aws_access_key_id=aws_access_key_id,
                aws_secret_access_key=aws_secret_access_key,
                aws_session_token=aws_session_token,
                sse=sse,
                sse_kms_key_id=sse_kms_key_id,
                max_attempts=max_attempts,
                connect_timeout_s=connect_timeout_s,
                read_timeout_s=read_timeout_s,
            )
        )

    @classmethod
    def sharing(cls, blobs: S3Blobs) -> S3EventArchive:
        """An instance over an existing backend (same bucket, prefix and client)."""
        instance = cls.__new__(cls)
        BlobEventArchive.__init__(instance, blobs)
        return instance
