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
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import BinaryIO, NamedTuple

from tether.persistence.codec import sha256_hex

LOG_MAX_BYTES = 1 << 20
"""A log past this size is folded into the object file by the next update."""
LOG_MAX_RECORD_BYTES = 1 << 16
"""Versions larger than this replace the object file (each update would grow the log fast),
and so do updates of an object file larger than this (every read hashes it to check the log's
header: a large file is replaced once, and the log starts on top of the small one)."""

_MAGIC = b"TLOG1 "
_HEADER_BYTES = len(_MAGIC) + 64 + 1
_TRAILER = b"\0TLOGREC"
_LEN = struct.Struct(">Q")
_RECORD_OVERHEAD = 2 * _LEN.size + len(_TRAILER)


def log_path(path: Path) -> Path:
    """The update log of the object file ``path`` (hidden: listings skip dot files)."""
    return path.with_name(f".{path.name}.log")


class LogTail(NamedTuple):
    """What a log holds for the object file it was read against."""

    record: bytes | None
    """The newest complete version (None: the log is absent, stale or empty)."""
    end: int
    """The offset after that record (where the next one goes; 0 when the log is not usable)."""


def header(base: bytes) -> bytes:
    """The header of a log extending an object file holding ``base``."""
    return _MAGIC + sha256_hex(base).encode() + b"\n"


def record(data: bytes) -> bytes:
    """One update as appended to a log."""
    return _LEN.pack(len(data)) + data + _LEN.pack(len(data)) + _TRAILER


def read_tail(path: Path, base: bytes) -> LogTail:
    """The newest version in ``path``'s log, if that log extends ``base`` (the object file's
    bytes, read first).

    Raises:
        OSError: the log could not be read (the caller reports it).
    """
    try:
        handle = open(log_path(path), "rb")  # noqa: SIM115 - closed below, on every path
    except (FileNotFoundError, NotADirectoryError):
        return LogTail(None, 0)
    with handle:
        head = handle.read(_HEADER_BYTES)
        if head != header(base):
            return LogTail(None, 0)
        size = os.fstat(handle.fileno()).st_size
        if size == _HEADER_BYTES:
            return LogTail(None, _HEADER_BYTES)
        newest = _last_record(handle, size)
        if newest is not None:
            return LogTail(newest, size)
        # a torn tail (or an append in progress): the last record that reads back whole
        handle.seek(_HEADER_BYTES)
        return _scan(handle.read(size - _HEADER_BYTES))


def _last_record(handle: BinaryIO, size: int) -> bytes | None:
    """The record ending at ``size`` when its trailer and both lengths agree, else None."""
    if size < _HEADER_BYTES + _RECORD_OVERHEAD:
        return None
    handle.seek(size - len(_TRAILER) - _LEN.size)
    tail = handle.read(_LEN.size + len(_TRAILER))
    if tail[_LEN.size :] != _TRAILER:
        return None
    (length,) = _LEN.unpack(tail[: _LEN.size])
    start = size - _RECORD_OVERHEAD - length
    if start < _HEADER_BYTES:
        return None
    handle.seek(start)
    body = handle.read(_LEN.size + length)
    if len(body) != _LEN.size + length or _LEN.unpack(body[: _LEN.size])[0] != length:
        return None
    return bytes(body[_LEN.size :])


def _scan(data: bytes) -> LogTail:
    """The last whole record of a log body read from its start (the slow path)."""
    offset, newest, end = 0, None, _HEADER_BYTES
    while offset + _RECORD_OVERHEAD <= len(data):
        (length,) = _LEN.unpack_from(data, offset)
        stop = offset + _RECORD_OVERHEAD + length
        if stop > len(data) or data[stop - len(_TRAILER) : stop] != _TRAILER:
            break
        if _LEN.unpack_from(data, offset + _LEN.size + length)[0] != length:
            break
        newest = data[offset + _LEN.size : offset + _LEN.size + length]
        offset = stop
        end = _HEADER_BYTES + stop
    return LogTail(newest, end if newest is not None else _HEADER_BYTES)


def append(path: Path, end: int, data: bytes) -> None:
    """Append ``data`` as the next record of ``path``'s log (which reads back to ``end``),
    cutting any torn tail first, and sync it (data and size: one journal commit)."""
    fd = os.open(log_path(path), os.O_WRONLY)
    try:
        if os.fstat(fd).st_size != end:
            os.ftruncate(fd, end)
        os.pwrite(fd, record(data), end)
        os.fdatasync(fd)
    finally:
        os.close(fd)
