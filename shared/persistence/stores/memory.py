"""The in-process snapshot store (tests, single-process use)."""

from __future__ import annotations

from tether.persistence.blobs.memory import MemoryBlobs
from tether.persistence.stores.blob import BlobSnapshotStore


class InMemorySnapshotStore(BlobSnapshotStore):
    """Heads kept as checksummed bytes in a locked dict.

    Loads parse fresh objects and saves serialise, so callers never share mutable state with
    the store. Versions are increasing integer strings.
    """

    blobs: MemoryBlobs

    def __init__(self, blobs: MemoryBlobs | None = None) -> None:
        """Args:
        blobs: a backend to share (default: a new private one).
        """
        super().__init__(blobs if blobs is not None else MemoryBlobs())
