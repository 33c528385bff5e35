"""The snapshot store on a local directory: ``<root>/v1/<tenant>/<session>/head.json``."""

from __future__ import annotations

import os

from tether.persistence.blobs.local import LocalBlobs
from tether.persistence.journal import HeadJournal
from tether.persistence.objects import MAX_HEADER_BYTES
from tether.persistence.stores.blob import BlobSnapshotStore

_CHUNKED_HEAD = b',"body":{"schema_version":2,'
_HEADER_BYTES = MAX_HEADER_BYTES + len(_CHUNKED_HEAD)


def chunked_heads(base: bytes, data: bytes) -> bool:
    """Whether the stored head and the new one are both of schema version 2 (the envelope's
    header, then the body, whose first field is the version: see
    :mod:`tether.persistence.codec`)."""
    return _CHUNKED_HEAD in base[:_HEADER_BYTES] and _CHUNKED_HEAD in data[:_HEADER_BYTES]


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
            default, where only heads of schema version 2 (the Agents SDK session's) are
            updated through the log, on top of a ``head.json`` of version 2: a build from
            before reads ``head.json`` alone, and refuses those ("upgrade Tether") instead of
            taking an older head for the current one. The Agents SDK session's appends go
            to the head's journal as patches (:mod:`tether.persistence.journal`), on a
            ``head.json`` marked so that such builds refuse it too.
        """
        super().__init__(
            LocalBlobs(root, update_log=update_log or chunked_heads, journal=HeadJournal())
        )

    @property
    def root(self) -> str:
        """The absolute root directory."""
        return str(self.blobs.root)
