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

    def __init__(self, root: str | os.PathLike[str], *, update_log: bool = False) -> None:
        """Args:
        root: the store's directory (created on first write).
        update_log: append head updates to the head's update log (one sync per save instead
            of two; see :mod:`tether.persistence.blobs.local_log`). A session directory then
            holds ``head.json`` and ``.head.json.log``: copy both to back it up. Off by
            default: a build from before this option reads ``head.json`` alone.
        """
        super().__init__(LocalBlobs(root, update_log=update_log))

    @property
    def root(self) -> str:
        """The absolute root directory."""
        return str(self.blobs.root)
