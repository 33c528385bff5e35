"""The in-process event archive (tests, single-process use)."""

from __future__ import annotations

from tether.persistence.archives.blob import BlobEventArchive
from tether.persistence.blobs.memory import MemoryBlobs


class InMemoryEventArchive(BlobEventArchive):
    """Segments kept as checksummed bytes in a locked dict."""

    blobs: MemoryBlobs

    def __init__(self, blobs: MemoryBlobs | None = None) -> None:
        """Args:
        blobs: a backend to share (default: a new private one).
        """
        super().__init__(blobs if blobs is not None else MemoryBlobs())
