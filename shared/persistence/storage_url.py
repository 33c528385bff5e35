"""Open a snapshot store and an event archive from one storage URL.

Accepted forms:

- ``memory://``: in-process (tests, single-process use).
- ``file:///absolute/path``: a local directory (heads and segments side by side).
- ``s3://bucket`` or ``s3://bucket/key/prefix``: an S3 bucket, optionally under a key prefix.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, unquote, urlsplit

from tether.errors import ConfigurationError
from tether.persistence.archives.base import EventArchive
from tether.persistence.archives.local import LocalEventArchive
from tether.persistence.archives.memory import InMemoryEventArchive
from tether.persistence.archives.s3 import S3EventArchive
from tether.persistence.blobs.memory import MemoryBlobs
from tether.persistence.blobs.s3 import S3Options, SseMode
from tether.persistence.stores.base import SnapshotStore
from tether.persistence.stores.local import LocalSnapshotStore
from tether.persistence.stores.memory import InMemorySnapshotStore
from tether.persistence.stores.s3 import S3SnapshotStore

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from tether.settings import Settings

ACCEPTED_FORMS = "memory://, file:///absolute/path, s3://bucket[/prefix]"


def storage_from_settings(settings: Settings) -> tuple[SnapshotStore, EventArchive]:
    """The snapshot store and event archive ``TETHER_STORE_URL`` and ``TETHER_S3_*`` name."""
    return open_storage(
        settings.store_url,
        endpoint_url=settings.s3_endpoint_url,
        region_name=settings.s3_region,
        sse=settings.s3_sse,
        sse_kms_key_id=settings.s3_kms_key_id,
    )


def open_storage(
    url: str,
    *,
    endpoint_url: str | None = None,
    region_name: str | None = None,
    client: S3Client | None = None,
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
    aws_session_token: str | None = None,
    sse: SseMode | None = None,
    sse_kms_key_id: str | None = None,
    max_attempts: int = 5,
) -> tuple[SnapshotStore, EventArchive]:
    """The snapshot store and event archive named by ``url``.

    The keyword arguments configure ``s3://`` storage (see
    :class:`tether.persistence.blobs.s3.S3Blobs`) and are ignored for the other schemes. Nothing
    is contacted here: clients connect lazily.

    Raises:
        ConfigurationError: ``url`` is not one of the accepted forms (the message names it and
            lists them).
    """
    parts = _split(url)
    scheme = parts.scheme.lower()
    if scheme == "memory":
        if parts.netloc or parts.path:
            raise _bad(url, "memory:// takes no name or path")
        blobs = MemoryBlobs()
        return InMemorySnapshotStore(blobs), InMemoryEventArchive(blobs)
    if scheme == "file":
        root = _file_root(url, parts)
        return LocalSnapshotStore(root), LocalEventArchive(root)
    if scheme == "s3":
        options: S3Options = {
            "client": client,
            "endpoint_url": endpoint_url,
            "region_name": region_name,
            "aws_access_key_id": aws_access_key_id,
            "aws_secret_access_key": aws_secret_access_key,
            "aws_session_token": aws_session_token,
            "sse": sse,
            "sse_kms_key_id": sse_kms_key_id,
            "max_attempts": max_attempts,
        }
        return _open_s3(url, parts, options)
    raise _bad(url, f"unknown scheme {parts.scheme!r}" if parts.scheme else "no scheme")


def _split(url: str) -> SplitResult:
    """``url`` split, refusing what no accepted form has (queries and fragments)."""
    if not isinstance(url, str):
        raise ConfigurationError(f"storage URL must be a string; use one of {ACCEPTED_FORMS}")
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:
        raise _bad(url, str(exc)) from exc
    if parts.query or parts.fragment:
        raise _bad(url, "query strings and fragments are not supported")
    return parts


def _open_s3(
    url: str, parts: SplitResult, options: S3Options
) -> tuple[SnapshotStore, EventArchive]:
    bucket, prefix = _s3_location(url, parts)
    try:
        store = S3SnapshotStore(bucket, prefix, **options)
    except ConfigurationError as exc:
        raise _bad(url, str(exc)) from exc
    # The archive shares the store's validated settings and lazily created client.
    return store, S3EventArchive.sharing(store.blobs)


def _file_root(url: str, parts: SplitResult) -> str:
    if parts.netloc not in ("", "localhost"):
        raise _bad(url, f"file URLs name a local path; host {parts.netloc!r} is not supported")
    path = unquote(parts.path)
    if not path.startswith("/") or path == "/":
        raise _bad(url, "file URLs need an absolute directory path such as file:///var/tether")
    if "\x00" in path:
        raise _bad(url, "the path contains a NUL character")
    return path


def _s3_location(url: str, parts: SplitResult) -> tuple[str, str]:
    if "@" in parts.netloc or ":" in parts.netloc:
        raise _bad(url, "put credentials and endpoints in settings, not in the URL")
    if not parts.netloc:
        raise _bad(url, "the bucket name is missing")
    return parts.netloc, unquote(parts.path).strip("/")


def _bad(url: str, reason: str) -> ConfigurationError:
    return ConfigurationError(
        f"storage URL {_redact(url)!r} is not valid: {reason}. Use one of {ACCEPTED_FORMS}"
    )


def _redact(url: str) -> str:
    """``url`` without any ``user:password@`` part, so secrets never reach messages or logs."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.\-]*://)[^/@]*@", r"\1***@", url)
