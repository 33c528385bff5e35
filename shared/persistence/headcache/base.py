"""The head-cache seam: a copy of each session's newest head beside the lease, so the next run
of a session reads it from Redis instead of the object store.

Why: a run's restore is one object-store GET (3 ms on a local moto, 10-30 ms on S3) on the
critical path of every run, for a head the previous run of the session has just written. The
cache holds that head, written by its writer right after the store accepted it.

Why it can never make a run act on an old head:

- Only the current lease holder fills it: :meth:`HeadCache.put` names the writer's lease fence
  and is refused (and the entry dropped) unless that fence is still the session's newest. A
  worker frozen between its store write and its cache write cannot overwrite a newer holder's
  entry after it wakes up.
- Readers never fill it (a read-then-fill races with a writer), and every write to the store
  that does not go through a filled ``put`` drops the entry.
- A lease taken over from a holder that stopped without releasing drops the entry before it
  reads (the holder may have written the store and died before its ``put``), and a drain that
  ends without finishing cleanly drops it before it releases the lease (or keeps the lease to
  expire, when the drop fails, so the next holder takes over).
- The compare-and-set of the next store write still checks the version: an entry that were
  somehow stale would fail that write (and be dropped) rather than overwrite anything.

Persisted format (versioned): ``thc2`` ``\\n`` version token ``\\n`` the sealed head object,
byte for byte what the store holds, zlib-compressed (its checksum is checked on every read after
decompression). Compressed because the cache's memory is every head run within the TTL: JSON
heads shrink several times at zlib's fastest level for a fraction of a millisecond. ``thc1``
entries (the same, uncompressed, written by earlier builds) are still read.

Why a read is bounded: a session's keys, this entry included, are writable by the session's
tenant (docs/trust-model.md), so an entry may be anything, e.g. a few megabytes that inflate to
gigabytes. A reader takes at most :func:`entry_limit` bytes of it and inflates at most the head
size limit; anything beyond is no entry a ``put`` wrote: a miss, and the entry is dropped.
"""

from __future__ import annotations

import zlib
from typing import NamedTuple, Protocol, runtime_checkable

FORMAT_TAG = b"thc2"
"""The first line of a cached entry: the entry format's version."""

_RAW_TAG = b"thc1"
"""The uncompressed format of earlier builds (read, never written)."""

#: zlib's fastest level: most of the size gain on JSON at a fraction of the time.
_ZLIB_LEVEL = 1

MAX_HEAD_BYTES = 16_000_000
"""The largest head any cache holds: the ceiling of ``TETHER_HEAD_CACHE_MAX_BYTES``. Readers
that do not know the configured limit (the worker's claim) inflate no more than this."""

#: The longest version token an entry frames (the stores' tokens are ETags and short hashes).
_MAX_VERSION_BYTES = 256


def entry_limit(max_bytes: int) -> int:
    """The longest entry a head of up to ``max_bytes`` packs into: zlib's worst case
    (``compressBound``: stored blocks on incompressible data) plus the framing. A longer entry
    was not written by a ``put``."""
    deflated = max_bytes + (max_bytes >> 12) + (max_bytes >> 14) + (max_bytes >> 25) + 13
    return len(FORMAT_TAG) + 2 + _MAX_VERSION_BYTES + deflated


MAX_ENTRY_BYTES = entry_limit(MAX_HEAD_BYTES)
"""The longest entry under any setting; ``claim.lua`` restates it (the claim's read has no
setting to go by), and a test holds the two equal."""


class CachedHead(NamedTuple):
    """A cached head: the stored object's bytes and the store's version token for them."""

    data: bytes
    version: str


@runtime_checkable
class HeadCache(Protocol):
    """The newest head of each session, as its lease holder last wrote it."""

    def get(self, tenant: str, session_id: str) -> CachedHead | None:
        """The cached head, or None (never cached, expired, dropped, or unreadable)."""

    def put(
        self, tenant: str, session_id: str, data: bytes, version: str, writer_fence: int
    ) -> bool:
        """Cache ``data`` (stored under ``version``) when ``writer_fence`` is the session's
        newest lease fence and the entry fits; otherwise drop the entry. True when cached."""

    def drop(self, tenant: str, session_id: str) -> None:
        """Forget the session's entry (the next read goes to the store)."""


def pack(data: bytes, version: str) -> bytes | None:
    """The entry for ``data`` under ``version`` (None: the version cannot be framed)."""
    if not version or "\n" in version or len(version.encode()) > _MAX_VERSION_BYTES:
        return None
    return FORMAT_TAG + b"\n" + version.encode() + b"\n" + zlib.compress(data, _ZLIB_LEVEL)


def entry_for(data: bytes, version: str, writer_fence: int, max_bytes: int) -> bytes | None:
    """The entry a ``put`` may store, or None when it must drop instead (no lease, a head over
    ``max_bytes``, or a version that cannot be framed); the fence check is the backend's."""
    if writer_fence <= 0 or len(data) > max_bytes:
        return None
    return pack(data, version)


def unpack(entry: bytes, max_bytes: int = MAX_HEAD_BYTES) -> CachedHead | None:
    """The head in ``entry``, or None when it is not an entry of a known format or holds a head
    over ``max_bytes`` (none is inflated past that: see the module's notes)."""
    if len(entry) > entry_limit(max_bytes):
        return None
    tag, sep, rest = entry.partition(b"\n")
    if tag not in (FORMAT_TAG, _RAW_TAG) or not sep:
        return None
    version, sep, data = rest.partition(b"\n")
    if not sep or not version:
        return None
    head = _inflate(data, max_bytes) if tag == FORMAT_TAG else data
    if head is None or len(head) > max_bytes:
        return None
    return CachedHead(head, version.decode(errors="replace"))


def _inflate(data: bytes, max_bytes: int) -> bytes | None:
    """``data`` decompressed, or None when it is damaged, cut short or inflates past
    ``max_bytes`` (decompression stops one byte past the limit: a bomb costs no more)."""
    inflater = zlib.decompressobj()
    try:
        head = inflater.decompress(data, max_bytes + 1)  # max_length 0 would mean no limit
    except zlib.error:
        return None
    return head if inflater.eof and len(head) <= max_bytes else None
