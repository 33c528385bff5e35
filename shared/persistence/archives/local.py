"""The event archive on a local directory: ``<root>/v1/<tenant>/<session>/events/*.json``."""

from __future__ import annotations

import os

from tether.persistence.archives.blob import BlobEventArchive
from tether.persistence.blobs.local import LocalBlobs


class LocalEventArchive(BlobEventArchive):
    """Segments as files, each written atomically and never overwritten.

    It may share its root with a :class:`tether.persistence.stores.local.LocalSnapshotStore`.
    """

    blobs: LocalBlobs

    def __init__(self, root: str | os.PathLike[str]) -> None:
        """Args:
        root: the archive's directory (created on first write).
        """
        super().__init__(LocalBlobs(root))

    @property
    def root(self) -> str:
        """The absolute root directory."""
        return str(self.blobs.root)
