"""The primitive object backends under the snapshot stores and event archives.

A backend stores opaque bytes under ``/``-separated keys (built by
:mod:`tether.persistence.objects`) and
offers only primitives: read with a version token, compare-and-set write, delete, and two
listings. Everything else (envelopes, checksums, codecs, id validation, segment logic) is written
once in :mod:`tether.persistence.stores.blob` and :mod:`tether.persistence.archives.blob`.

Implementations: :class:`tether.persistence.blobs.memory.MemoryBlobs`,
:class:`tether.persistence.blobs.local.LocalBlobs`,
:class:`tether.persistence.blobs.s3.S3Blobs`.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable


class Blob(NamedTuple):
    """Stored bytes and the opaque version token they were stored under."""

    data: bytes
    token: str


@runtime_checkable
class BlobBackend(Protocol):
    """Primitive keyed byte storage with compare-and-set writes."""

    def describe(self, key: str) -> str:
        """Where ``key`` lives, for error messages (a path, ``s3://bucket/key``...)."""

    def get(self, key: str) -> Blob | None:
        """The bytes and token stored under ``key``, or None when absent.

        Raises:
            StoreUnavailable: the backend could not be reached.
        """

    def put(self, key: str, data: bytes, *, expected: str | None) -> str:
        """Store ``data`` if the current token equals ``expected`` (None: key must be absent).

        Returns:
            The new token.

        Raises:
            VersionConflict: the current token differs; nothing was written.
            StoreUnavailable: the backend could not be reached.
        """

    def delete(self, key: str) -> bool:
        """Delete ``key``; True when it existed."""

    def delete_many(self, keys: list[str]) -> int:
        """Delete several keys; return how many were requested and are now gone."""

    def list_names(self, prefix: str) -> list[str]:
        """Every name ``n`` (without ``/``) such that ``prefix + n`` is a stored key, sorted."""

    def list_children(
        self, prefix: str, leaf: str, *, rollup: str, after: str | None, limit: int
    ) -> list[str]:
        """Child names ``c`` such that ``prefix + c + "/" + leaf`` exists, in key order.

        Only children whose ``c + "/"`` sorts after ``after + "/"`` are returned, at most
        ``limit``. ``rollup`` names a sub-directory of each child that the backend may skip
        wholesale (an S3 listing optimisation: it holds many objects and never ``leaf``).
        """
