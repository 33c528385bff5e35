"""The snapshot store on a local directory: ``<root>/v1/<tenant>/<session>/head.json``."""

from __future__ import annotations

import os

from tether.persistence.blobs.local import LocalBlobs
from tether.persistence.stores.blob import BlobSnapshotStore


class LocalSnapshotStore(BlobSnapshotStore):
    """Heads as files, written atomically under a per-session ``flock``.

    Safe for several threads and processes on one host (or on a POSIX file system with working
    ``flock``). Versions are the sha256 of the stored file.
    """

    blobs: LocalBlobs

    def __init__(self, root: str | os.PathLike[str]) -> None:
        """Args:
        root: the store's directory (created on first write).
        """
        super().__init__(LocalBlobs(root))

    @property
    def root(self) -> str:
        """The absolute root directory."""
        return str(self.blobs.root)
