"""The update log of a local object: later versions appended to one file, one sync each.

Replacing a file atomically costs two journal commits on ext4 and most file systems (the new
file's ``fsync``, then the directory's after the rename), where appending to a file that exists
and ``fdatasync``-ing it costs one, like SQLite's write-ahead log. So an update of an existing
object may instead be appended to ``.<name>.log`` beside it::

    header   b"TLOG1 " + sha256 hex of the object file it extends + b"\\n"     (71 bytes)
    record   >Q length + the new version's bytes + >Q length + b"\\0TLOGREC"  (one per update)

The object's current version is the last complete record of a log whose header names the
object file's current bytes; a log naming other bytes (the object was replaced since: a
compaction, an operator's restore) is ignored. A record is complete when its trailer reads
back; a torn tail (a crash while appending) is skipped by readers and cut by the next writer.
The log is bounded: past :data:`LOG_MAX_BYTES` the next update replaces the object file and
drops the log.

A record that grows the file is written with :data:`PAD_BYTES` zeros after it, and the next
records overwrite those zeros instead of growing the file: an ``fdatasync`` that must also
commit a new file size costs about a third more on ext4 (measured 113 against 82 µs), and an
append pays it once per :data:`PAD_BYTES` instead of every time. The log's content ends after
its last byte that is not zero (a record ends with its trailer, never with zero); readers find
it from the end of the file, or from where this process saw the last record end (checked: a
trailer before it, zeros after). No writer calls ``fstat`` on a log either: measured on Linux
6.18, one ``fstat`` before the write makes the ``fdatasync`` after it cost what growing the file
does (most likely the multigrain timestamps of 6.13 and later: a file whose timestamps were
read gets a fine-grained one on its next write, which the sync then commits).

A log headed ``TLOG2`` (a *journal*) may also hold patch records, trailer ``b"\\0TLOGPAT"``: a
small change of the version before it (for a session head, the events one append adds; see
:mod:`tether.persistence.journal`), so that such an append writes and syncs that change alone::

    patch    >Q length + token of the version it patches (64 hex) + sha256 hex of the change
             + the change + >Q length + b"\\0TLOGPAT"

The version after a patch is the newest full version (the last whole record, else the object
file) with every later patch applied, in order; its token is the sha256 of the patch record's
data, which names the token before it, so tokens stay unique per version and a compare-and-set
reads only the last record. Only a journal holds patches, and only on an object file its owner
marked as journaled (a head's envelope version 2), so a build that knows only ``TLOG1`` ignores
the journal and refuses the object file instead of taking it for the current version.
"""

from __future__ import annotations

import functools
import os
import struct
from pathlib import Path
from typing import NamedTuple

from tether.persistence.codec import sha256_hex

LOG_MAX_BYTES = 1 << 20
"""A log past this size is folded into the object file by the next update."""
LOG_MAX_RECORD_BYTES = 1 << 16
"""Versions larger than this replace the object file (each update would grow the log fast),
and so do updates of an object file larger than this (every read hashes it to check the log's
header: a large file is replaced once, and the log starts on top of the small one)."""

_MAGIC = b"TLOG1 "
_JOURNAL_MAGIC = b"TLOG2 "
_HEADER_BYTES = len(_MAGIC) + 64 + 1
_TRAILER = b"\0TLOGREC"
_PATCH_TRAILER = b"\0TLOGPAT"
PAD_BYTES = 1 << 14
"""Zeros written after a record that grows a log, for the next records to overwrite."""
_TOKEN_HEX = 64
_LEN = struct.Struct(">Q")
_RECORD_OVERHEAD = 2 * _LEN.size + len(_TRAILER)


@functools.lru_cache(maxsize=4096)  # pathlib is slow next to a small append
def log_path(path: Path) -> Path:
    """The update log of the object file ``path`` (hidden: listings skip dot files)."""
    return path.with_name(f".{path.name}.log")


class LogTail(NamedTuple):
    """What a log holds for the object file it was read against."""

    record: bytes | None
    """The newest complete full version (None: the log is absent, stale or holds none: then
    the object file is the newest full version)."""
    end: int
    """The offset after the last complete record (where the next one goes; 0 when the log is
    not usable)."""
    patches: tuple[bytes, ...] = ()
    """The changes patched onto that full version since, oldest first (a journal's only)."""
    token: str | None = None
    """The version token, when a log extending the object file was read (None: the object
    file alone is the version; see :func:`version_token`)."""
    journal: bool = False
    """Whether the log is a journal (may take patches)."""
    size: int = 0
    """The file's size: ``end`` and the zeros after it (which the next records overwrite)."""
    torn: bool = False
    """Bytes other than zeros follow ``end`` (a torn record): the next writer cuts them."""


def version_token(base: bytes, tail: LogTail) -> str:
    """The token of the current version of an object file holding ``base`` whose log reads
    back as ``tail``: the last patch's, else the sha256 of the newest full version."""
    if tail.token is not None:
        return tail.token
    return _digest(base).decode() if tail.record is None else sha256_hex(tail.record)


class _Record(NamedTuple):
    data: bytes
    patch: bool


def header(base: bytes, *, journal: bool = False) -> bytes:
    """The header of a log (a journal when ``journal``) extending an object file holding
    ``base``."""
    return (_JOURNAL_MAGIC if journal else _MAGIC) + _digest(base) + b"\n"


def record(data: bytes) -> bytes:
    """One update as appended to a log."""
    return _LEN.pack(len(data)) + data + _LEN.pack(len(data)) + _TRAILER


def patch_record(previous: str, change: bytes) -> tuple[bytes, str]:
    """A patch of the version whose token is ``previous``, as appended to a journal, and the
    token of the version it makes."""
    data = previous.encode() + sha256_hex(change).encode() + change
    return _LEN.pack(len(data)) + data + _LEN.pack(len(data)) + _PATCH_TRAILER, sha256_hex(data)


def open_log(path: Path, *, write: bool = False) -> int | None:
    """A descriptor of ``path``'s log (None: it has none), for :func:`read_tail` and, with
    ``write``, :func:`append` too: a writer opens its log once.

    Raises:
        OSError: the log could not be opened (the caller reports it).
    """
    try:
        return os.open(log_path(path), os.O_RDWR if write else os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None


def read_tail(
    path: Path, base: bytes, *, newest_only: bool = False, fd: int | None = None
) -> LogTail:
    """The newest version in ``path``'s log, if that log extends ``base`` (the object file's
    bytes, read first). With ``newest_only``, a journal's patches before the last are not
    read: only its token is needed (a compare-and-set), and ``patches`` holds it alone. With
    ``fd`` (from :func:`open_log`; None there: no log), the log is read through it and left
    open.

    Raises:
        OSError: the log could not be read (the caller reports it).
        ValueError: a journal's patches do not chain or fail their checksum (corrupt).
    """
    if fd is not None:
        return _read_tail(fd, path, base, newest_only)
    opened = open_log(path)
    if opened is None:
        return LogTail(None, 0)
    try:
        return _read_tail(opened, path, base, newest_only)
    finally:
        os.close(opened)


def _read_tail(fd: int, path: Path, base: bytes, newest_only: bool) -> LogTail:
    logged = log_path(path)
    head = os.pread(fd, _HEADER_BYTES, 0)
    journal = head == header(base, journal=True)
    if not journal and head != header(base):
        return LogTail(None, 0)
    size = os.lseek(fd, 0, os.SEEK_END)  # not fstat: see the module docstring
    stop, last = _stop(fd, logged, size)
    if newest_only:  # the last record alone: its length and trailer, then its bytes
        window = min(stop - _HEADER_BYTES, len(_TRAILER) + _LEN.size)
        if window == len(_TRAILER) + _LEN.size:
            if last is None:
                last = os.pread(fd, _LEN.size, stop - window)
            (length,) = _LEN.unpack_from(last)
            window = min(stop - _HEADER_BYTES, length + _RECORD_OVERHEAD)
    else:
        window = min(stop - _HEADER_BYTES, _WINDOW_BYTES)
    end = stop
    newest = _newest(os.pread(fd, window, stop - window), stop - window, journal, newest_only)
    if newest is None:
        # a torn tail (or an append in progress), or a long run of patches: every record
        records, end = _scan(_read_all(fd, _HEADER_BYTES, stop), journal)
        newest = _suffix(records)
    _seen(logged, end)
    if newest_only and newest and newest[-1].patch:
        last_patch = newest[-1].data
        return LogTail(None, end, (last_patch,), sha256_hex(last_patch), journal, size, stop != end)
    return _tail(newest, end, journal, base)._replace(size=size, torn=stop != end)


_ends: dict[Path, int] = {}
"""Where this process last saw each log's records end (a hint, checked before it is used)."""
_ENDS_KEPT = 4096

_patched: dict[Path, tuple[int, int]] = {}
"""Where the patch record this process appended last to each journal ends, and its length (a
hint for the next append, checked before it is used: see :func:`known_tail`)."""


def _seen(logged: Path, end: int) -> None:
    if len(_ends) >= _ENDS_KEPT and logged not in _ends:
        _ends.clear()
    _ends[logged] = end


def _wrote(logged: Path, end: int, patch_bytes: int) -> None:
    """Note a record this process wrote to ``logged``, ending at ``end`` (a patch of
    ``patch_bytes`` bytes; 0: a full version)."""
    _seen(logged, end)
    if len(_patched) >= _ENDS_KEPT and logged not in _patched:
        _patched.clear()
    if patch_bytes:
        _patched[logged] = (end, patch_bytes)
    else:
        _patched.pop(logged, None)


def known_tail(fd: int, path: Path, base: bytes) -> LogTail | None:
    """The tail of ``path``'s journal (descriptor ``fd``; ``base`` the object file's bytes), as
    :func:`read_tail` with ``newest_only`` gives it, when the journal still ends with the patch
    this process appended last: then one read of that record (and the 8 bytes after it, zeros)
    tells it. None when it does not, or when that is not known: read the tail.

    Raises:
        OSError: the journal could not be read (the caller reports it).
    """
    hint = _patched.get(log_path(path))
    if hint is None:
        return None
    end, length = hint
    start = end - length
    if start < _HEADER_BYTES or os.pread(fd, _HEADER_BYTES, 0) != header(base, journal=True):
        return None
    record = os.pread(fd, length + _LEN.size, start)
    size = _LEN.pack(length - _RECORD_OVERHEAD)
    if (
        len(record) != length + _LEN.size
        or record[: _LEN.size] != size
        or record[length - _LEN.size - len(_PATCH_TRAILER) : length - len(_PATCH_TRAILER)] != size
        or record[length - len(_PATCH_TRAILER) : length] != _PATCH_TRAILER
        or record[length:].strip(b"\0")
    ):
        return None
    last_patch = record[_LEN.size : length - _LEN.size - len(_PATCH_TRAILER)]
    file_size = os.lseek(fd, 0, os.SEEK_END)  # not fstat: see the module docstring
    return LogTail(None, end, (last_patch,), sha256_hex(last_patch), True, file_size)


def _stop(fd: int, logged: Path, size: int) -> tuple[int, bytes | None]:
    """Where the content of the log ``fd`` (``size`` bytes) stops: after its last byte that is
    not zero. With it, the last record's length field when read on the way (else None)."""
    hint = _ends.get(logged)
    overhead = _LEN.size + len(_TRAILER)
    if hint is not None and _HEADER_BYTES + overhead <= hint <= size:
        # a trailer ends at the hint and zeros follow: the content stops there (a trailer holds
        # no zero after its first byte, and any record starts with a length that is not zero)
        probe = os.pread(fd, overhead + _LEN.size, hint - overhead)
        trailer, after = probe[_LEN.size : overhead], probe[overhead:]
        if trailer in (_TRAILER, _PATCH_TRAILER) and not after.strip(b"\0"):
            return hint, probe[: _LEN.size]
    # no hint, or a stale one: the padding is never longer than PAD_BYTES, so the last
    # trailer is in this window unless the log holds no record (or another build padded it)
    window = min(size - _HEADER_BYTES, PAD_BYTES + overhead)
    if window <= 0:  # the header alone
        return size, None
    data = os.pread(fd, window, size - window).rstrip(b"\0")
    if not data and window < size - _HEADER_BYTES:
        data = _read_all(fd, _HEADER_BYTES, size).rstrip(b"\0")
        return _HEADER_BYTES + len(data), None
    return size - window + len(data), None


_last_digest: tuple[bytes, bytes] = (b"", sha256_hex(b"").encode())


def _digest(base: bytes) -> bytes:
    """sha256 hex of ``base``; the same bytes as last time are compared, not hashed again (an
    append reads the same object file every time)."""
    global _last_digest
    known, digest = _last_digest
    if base != known:
        digest = sha256_hex(base).encode()
        _last_digest = (base, digest)
    return digest


def _read_all(fd: int, start: int, end: int) -> bytes:
    """The bytes of ``fd`` from ``start`` to ``end`` (fewer if the file is shorter)."""
    parts = []
    while start < end:
        part = os.pread(fd, end - start, start)
        if not part:
            break
        parts.append(part)
        start += len(part)
    return b"".join(parts)


_WINDOW_BYTES = 1 << 16
"""How much of a log's end one read takes: usually the last full record and every patch after
it (a longer run is read whole)."""


def _newest(data: bytes, offset: int, journal: bool, newest_only: bool) -> list[_Record] | None:
    """The last full record and the patches after it, walking back from the end of ``data``
    (the log's bytes from ``offset`` on; an empty list: no record), or None when a record does
    not read back whole (a torn tail) or starts before ``data``."""
    records: list[_Record] = []
    end = len(data)
    while offset + end > _HEADER_BYTES:
        if end < _RECORD_OVERHEAD:
            return None
        trailer = data[end - len(_TRAILER) : end]
        if trailer != _TRAILER and not (journal and trailer == _PATCH_TRAILER):
            return None
        (length,) = _LEN.unpack_from(data, end - len(_TRAILER) - _LEN.size)
        start = end - _RECORD_OVERHEAD - length
        if start < 0 or offset + start < _HEADER_BYTES:
            return None
        if _LEN.unpack_from(data, start)[0] != length:
            return None
        found = _Record(data[start + _LEN.size : start + _LEN.size + length], trailer != _TRAILER)
        records.append(found)
        if not found.patch or newest_only:
            break
        end = start
    records.reverse()
    return records


def _scan(data: bytes, journal: bool) -> tuple[list[_Record], int]:
    """The whole records of a log body read from its start (the slow path), and the offset
    after the last one."""
    offset, records = 0, []
    while offset + _RECORD_OVERHEAD <= len(data):
        (length,) = _LEN.unpack_from(data, offset)
        stop = offset + _RECORD_OVERHEAD + length
        if stop > len(data):
            break
        trailer = data[stop - len(_TRAILER) : stop]
        if trailer != _TRAILER and not (journal and trailer == _PATCH_TRAILER):
            break
        if _LEN.unpack_from(data, offset + _LEN.size + length)[0] != length:
            break
        records.append(
            _Record(data[offset + _LEN.size : offset + _LEN.size + length], trailer != _TRAILER)
        )
        offset = stop
    return records, _HEADER_BYTES + offset


def _suffix(records: list[_Record]) -> list[_Record]:
    """The last full record and the patches after it (all of them when none is full)."""
    for at in range(len(records) - 1, -1, -1):
        if not records[at].patch:
            return records[at:]
    return records


def _tail(records: list[_Record], end: int, journal: bool, base: bytes) -> LogTail:
    """The tail of a log from its newest records, the patches' chain and checksums checked."""
    full: bytes | None = None
    if records and not records[0].patch:
        full, records = records[0].data, records[1:]
    token = _digest(base).decode() if full is None else sha256_hex(full)
    patches = []
    for found in records:
        data = found.data
        previous = data[:_TOKEN_HEX].decode("ascii", "replace")
        change = data[2 * _TOKEN_HEX :]
        if previous != token:
            raise ValueError(
                f"a patch names version {previous[:16]}, the version before it is {token[:16]}"
            )
        if data[_TOKEN_HEX : 2 * _TOKEN_HEX] != sha256_hex(change).encode():
            raise ValueError("a patch fails its checksum")
        patches.append(change)
        token = sha256_hex(data)
    return LogTail(full, end, tuple(patches), token, journal)


def append(
    path: Path, tail: LogTail, data: bytes, *, patch: bool = False, fd: int | None = None
) -> None:
    """Append ``data`` (a record built by :func:`record`, or by :func:`patch_record` when
    ``patch``) to ``path``'s log, read back as ``tail`` under the lock the caller holds,
    cutting any torn tail first, and sync it (one journal commit). The record overwrites the
    zeros after the last one when they are long enough, else it grows the file with
    :data:`PAD_BYTES` zeros after it. With ``fd`` (from ``open_log(path, write=True)``) the
    log is written through it and left open."""
    logged = log_path(path)
    if fd is None:
        opened = os.open(logged, os.O_WRONLY)
        try:
            append(path, tail, data, patch=patch, fd=opened)
        finally:
            os.close(opened)
        return
    body = data if patch else record(data)
    end, size = tail.end, tail.size
    if tail.torn or size < end:
        os.ftruncate(fd, end)
        size = end
    stop = end + len(body)
    if stop > size:
        body += bytes(PAD_BYTES)
    os.pwrite(fd, body, end)
    os.fdatasync(fd)
    _wrote(logged, stop, len(data) if patch else 0)


def start(
    path: Path, base: bytes, data: bytes, *, journal: bool = False, patch: bool = False
) -> bytes:
    """The bytes of a new log of the object file holding ``base`` whose first record is
    ``data`` (as :func:`append` takes it), with the zeros the next records overwrite."""
    first = header(base, journal=journal) + (data if patch else record(data))
    _wrote(log_path(path), len(first), len(data) if patch else 0)
    return first + bytes(PAD_BYTES)
