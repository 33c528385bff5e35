"""Blob backend on a local (or shared POSIX) directory.

Writes are atomic (temporary file in the same directory, fsync, ``os.replace``, fsync of the
directory) and the compare-and-set runs under an exclusive ``fcntl.flock`` on a ``.lock`` file
in the object's directory, so threads and processes on one host can never both win a write.
Lock files are never removed (removing one while another process holds it would let a third
process lock a fresh inode).

The version token is the sha256 of the stored bytes: identical bytes give identical tokens,
exactly like an S3 ETag, so a write based on the current content is always valid.

With ``update_log`` (always, or as a policy says) an update of an existing small object is
appended to its update log (one sync instead of two, see
:mod:`tether.persistence.blobs.local_log`). Reads always take the log into account, so
processes of this build sharing a root may differ in this setting; a build from before reads
the object file alone, which may be older (see
:class:`tether.persistence.stores.local.LocalSnapshotStore` for the policy that keeps those
safe). Back up a session directory whole: the object file alone may be older than its log.

With a :class:`JournalFormat`, :meth:`LocalBlobs.append_patch` stores a small change as a
patch record of the object's journal (a log that may hold patches; see
:mod:`tether.persistence.blobs.local_log`), and reads apply the patches.

Files are created with mode 0600 (sessions may hold private data); run every process that
shares a root as the same user. Needs POSIX ``flock`` (Linux, macOS; not Windows).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple, Protocol

from tether.errors import InvalidInput, SnapshotCorrupt, StoreUnavailable, VersionConflict
from tether.persistence.blobs import Blob, local_log
from tether.persistence.codec import sha256_hex
from tether.persistence.objects import listing_order

LogPolicy = Callable[[bytes, bytes], bool]
"""Whether an update may go to the update log, given the object file's bytes and the new ones."""

LOCK_NAME = ".lock"
_TEMP_PREFIX = ".tmp-"
_PATHS_KEPT = 4096
"""Object paths kept resolved (pathlib is slow next to a small append)."""


class JournalFormat(Protocol):
    """What the backend needs to know of the objects it keeps journals for (see
    :mod:`tether.persistence.blobs.local_log`): it never interprets their bytes itself."""

    def journaled(self, data: bytes) -> bool:
        """Whether an object file holding ``data`` is marked as journaled."""

    def mark(self, data: bytes, *, where: str) -> bytes:
        """``data`` (the object at ``where``) marked as journaled (the same version otherwise)."""

    def fold(self, full: bytes, patches: tuple[bytes, ...], *, where: str) -> bytes:
        """The bytes of the version ``patches`` (oldest first) make of ``full`` (the object at
        ``where``, named by errors)."""


class Journal(NamedTuple):
    """An object's current version as its newest full bytes and the patches after them."""

    full: bytes
    patches: tuple[bytes, ...]
    token: str


class LocalBlobs:
    """Objects as files under ``root``; key ``a/b/c`` is the file ``root/a/b/c``."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        update_log: bool | LogPolicy = False,
        journal: JournalFormat | None = None,
    ) -> None:
        """Args:
        root: the directory holding the objects (created on first write).
        update_log: append updates of existing small objects to their update log (one sync
            each) instead of replacing the file (two): always, never, or when a policy given
            the object file's bytes and the new ones says so.
        journal: the format of objects that may take patches (:meth:`append_patch`); None:
            none may, and reading an object that holds patches fails.
        """
        self.root = Path(os.path.abspath(root))
        self.update_log = update_log
        self.journal = journal
        self._paths: dict[str, Path] = {}

    def describe(self, key: str) -> str:
        return str(self._path(key))

    def get(self, key: str) -> Blob | None:
        journal = self.get_journal(key)
        if journal is None:
            return None
        if not journal.patches:
            return Blob(journal.full, journal.token)
        if self.journal is None:
            raise SnapshotCorrupt(
                f"{self._path(key)} has patches in its journal, which this backend cannot "
                "apply; open it through LocalSnapshotStore"
            )
        folded = self.journal.fold(journal.full, journal.patches, where=self.describe(key))
        return Blob(folded, journal.token)

    def get_journal(self, key: str) -> Journal | None:
        """The current version of ``key`` as its newest full bytes and the patches after them
        (unapplied: the caller folds them as it parses), or None when absent.

        Raises:
            SnapshotCorrupt: the journal's patches do not chain or fail their checksum.
        """
        path = self._path(key)
        base, tail = self._current(path)
        if base is None:
            return None
        full = base if tail.record is None else tail.record
        return Journal(full, tail.patches, local_log.version_token(base, tail))

    def token(self, key: str) -> str | None:
        """The version token of ``key`` (None: absent), without applying its patches."""
        path = self._path(key)
        base, tail = self._current(path, newest_only=True)
        return None if base is None else local_log.version_token(base, tail)

    def _current(
        self, path: Path, *, newest_only: bool = False, fd: int | None = None
    ) -> tuple[bytes | None, local_log.LogTail]:
        """The object file's bytes of ``path`` and its update log (see
        :func:`local_log.read_tail` for ``newest_only`` and ``fd``)."""
        base = _read(path)
        if base is None:
            return None, local_log.LogTail(None, 0)
        with _io(path):
            try:
                return base, local_log.read_tail(path, base, newest_only=newest_only, fd=fd)
            except ValueError as exc:
                log = local_log.log_path(path)
                raise SnapshotCorrupt(
                    f"the journal {log} is corrupt: {exc}. To recover, restore the session's "
                    f"directory from a backup, or move {log.name} aside to go back to the "
                    f"version in {path.name} (the writes since are lost)"
                ) from exc

    def put(self, key: str, data: bytes, *, expected: str | None) -> str:
        path = self._path(key)
        with _io(_parent(path)):
            _make_dirs(_parent(path))
        with _locked(_parent(path)):
            base, tail = self._current(path, newest_only=True)
            self._check(path, base, tail, expected)
            with _io(path):
                self._write(path, data, base, tail)
        return sha256_hex(data)

    def append_patch(self, key: str, change: bytes, *, expected: str) -> str | None:
        """Store the version ``change`` makes of the current one (version ``expected``) as one
        patch record in the object's journal; return its token. None (nothing written) when
        the object cannot take it here: absent, no journal format, too large, or the journal
        full; the caller then writes the whole version with :meth:`put`.

        The first patch on an object file not marked as journaled first replaces it with its
        marked copy (the same version, under a new token).

        Raises:
            VersionConflict: the current version is not ``expected``; nothing was written.
        """
        if self.journal is None or len(change) > local_log.LOG_MAX_RECORD_BYTES:
            return None
        path = self._path(key)
        lock = _lock(_parent(path))
        try:
            try:
                log = local_log.open_log(path, write=True)  # once, to read and to append
            except OSError as exc:
                raise _unavailable(path, exc) from exc
            try:
                if log is not None:
                    token = self._append_known(path, change, expected, log)
                    if token is not None:
                        return token
                return self._append_patch(path, change, expected, log)
            finally:
                if log is not None:
                    os.close(log)
        finally:
            os.close(lock)

    def _append_known(self, path: Path, change: bytes, expected: str, log: int) -> str | None:
        """:meth:`append_patch` when the journal ``log`` ends with the patch this process wrote
        last (:func:`local_log.known_tail`); None (nothing written) when it does not."""
        base = _read(path)
        try:
            tail = None if base is None else local_log.known_tail(log, path, base)
            if base is None or tail is None:
                return None
            token = self._check(path, base, tail, expected)
            assert token is not None
            patch, new_token = local_log.patch_record(token, change)
            if tail.end + len(patch) > local_log.LOG_MAX_BYTES:
                return None  # the long way returns None too: the caller writes the whole head
            local_log.append(path, tail, patch, patch=True, fd=log)
        except OSError as exc:
            raise _unavailable(path, exc) from exc
        return new_token

    def _append_patch(
        self, path: Path, change: bytes, expected: str, log: int | None
    ) -> str | None:
        """:meth:`append_patch` under the lock, through the journal's descriptor ``log`` (None:
        no journal yet)."""
        assert self.journal is not None
        base, tail = self._current(path, newest_only=True, fd=log)
        if base is None:
            return None
        token = self._check(path, base, tail, expected)
        assert token is not None  # the object exists
        full = base if tail.record is None else tail.record
        with _io(path):
            if not tail.journal and (tail.end or not self.journal.journaled(base)):
                if len(full) > local_log.LOG_MAX_RECORD_BYTES:
                    return None
                # mark the newest full version journaled (a build without journals then
                # refuses it instead of reading it as current) and start on top of it
                base = self.journal.mark(full, where=str(path))
                _atomic_write(path, base)
                with contextlib.suppress(FileNotFoundError):
                    local_log.log_path(path).unlink()
                token, tail = sha256_hex(base), local_log.LogTail(None, 0)
            patch, new_token = local_log.patch_record(token, change)
            if not tail.end:
                first = local_log.start(path, base, patch, journal=True, patch=True)
                _atomic_write(local_log.log_path(path), first)
            elif tail.end + len(patch) > local_log.LOG_MAX_BYTES:
                return None
            else:
                local_log.append(path, tail, patch, patch=True, fd=log)
        return new_token

    def _check(
        self, path: Path, base: bytes | None, tail: local_log.LogTail, expected: str | None
    ) -> str | None:
        """The current token of ``path`` when it is ``expected``.

        Raises:
            VersionConflict: it is not.
        """
        current = None if base is None else local_log.version_token(base, tail)
        if current != expected:
            raise VersionConflict(
                f"{path} is at version {_short(current)}, expected "
                f"{_short(expected)}; reload it and retry"
            )
        return current

    def _write(self, path: Path, data: bytes, base: bytes | None, tail: local_log.LogTail) -> None:
        """Store ``data`` as ``path``'s new version: appended to its update log when allowed
        and there is room, else by replacing the object file (and dropping the log)."""
        logged = local_log.log_path(path)
        if base is not None and data == base:
            # back to the object file's bytes: dropping the log is the whole write (and a log
            # must never survive on top of a file equal to its base by accident)
            with contextlib.suppress(FileNotFoundError):
                logged.unlink()
                _fsync_dir(path.parent)
            return
        size = len(local_log.record(data))
        # a journaled object file is refused by builds that do not read its log, so any
        # update may go there
        journal = tail.journal or (
            base is not None and self.journal is not None and self.journal.journaled(base)
        )
        if (
            base is not None
            and max(len(data), len(base)) <= local_log.LOG_MAX_RECORD_BYTES
            and max(tail.end, len(local_log.header(base))) + size <= local_log.LOG_MAX_BYTES
            and (
                journal
                or (self.update_log(base, data) if callable(self.update_log) else self.update_log)
            )
        ):
            if tail.end:
                local_log.append(path, tail, data)
            else:  # no log extends this file yet: start one (a new file: synced like one)
                _atomic_write(logged, local_log.start(path, base, data, journal=journal))
            return
        _atomic_write(path, data)
        # after the rename: a reader between the two sees the new file and a log that does
        # not extend it, which it ignores
        with contextlib.suppress(FileNotFoundError):
            logged.unlink()

    def delete(self, key: str) -> bool:
        return self.delete_many([key]) == 1

    def delete_many(self, keys: list[str]) -> int:
        by_dir: dict[Path, list[Path]] = {}
        for key in keys:
            path = self._path(key)
            by_dir.setdefault(path.parent, []).append(path)
        deleted = 0
        for directory, paths in by_dir.items():
            if not directory.is_dir():
                continue
            with _locked(directory):
                for path in paths:
                    with contextlib.suppress(FileNotFoundError), _io(path, pass_missing=True):
                        path.unlink()
                        deleted += 1
                    # after its object: an orphan log extends bytes that are gone, and is ignored
                    with contextlib.suppress(FileNotFoundError), _io(path, pass_missing=True):
                        local_log.log_path(path).unlink()
                with _io(directory):
                    _fsync_dir(directory)
        return deleted

    def list_names(self, prefix: str) -> list[str]:
        directory = self._dir(prefix)
        return sorted(
            entry.name
            for entry in _scan(directory)
            if not entry.name.startswith(".") and entry.is_file()
        )

    def list_children(
        self, prefix: str, leaf: str, *, rollup: str, after: str | None, limit: int
    ) -> list[str]:
        directory = self._dir(prefix)
        floor = None if after is None else listing_order(after)
        names = sorted(
            (
                entry.name
                for entry in _scan(directory)
                if not entry.name.startswith(".")
                and (floor is None or listing_order(entry.name) > floor)
            ),
            key=listing_order,
        )
        out: list[str] = []
        for name in names:
            if len(out) >= limit:
                break
            if (directory / name / leaf).is_file():
                out.append(name)
        return out

    def _path(self, key: str) -> Path:
        path = self._paths.get(key)
        if path is not None:
            return path
        parts = key.split("/")
        # Keys are built from validated ids; this is a second line against path traversal.
        if any(part in ("", ".", "..") for part in parts):
            raise InvalidInput(f"object key {key!r} is not a plain relative path")
        path = self.root.joinpath(*parts)
        if len(self._paths) >= _PATHS_KEPT:
            self._paths.clear()  # a bound, not an LRU: heads are read again and again
        self._paths[key] = path
        return path

    def _dir(self, prefix: str) -> Path:
        return self._path(prefix.rstrip("/"))


_READ_BYTES = 1 << 16


def _read(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise _unavailable(path, exc) from exc
    try:
        # raw reads: a head is read on every append, and the buffered file object costs more
        # than the read itself; a short read of a regular file is its end, so a small file
        # costs one read (no fstat, no second read to see the end)
        data = os.read(fd, _READ_BYTES)
        if len(data) < _READ_BYTES:
            return data
        parts = [data]
        while part := os.read(fd, _READ_BYTES):
            parts.append(part)
        return b"".join(parts)
    except OSError as exc:
        raise _unavailable(path, exc) from exc
    finally:
        os.close(fd)


def _scan(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise _unavailable(directory, exc) from exc


@functools.lru_cache(maxsize=4096)  # pathlib is slow next to a small append
def _parent(path: Path) -> Path:
    return path.parent


@functools.lru_cache(maxsize=4096)
def _lock_path(directory: Path) -> Path:
    return directory / LOCK_NAME


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Hold the exclusive lock of ``directory`` (threads and processes alike)."""
    fd = _lock(directory)
    try:
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def _lock(directory: Path) -> int:
    """Take the exclusive lock of ``directory``; closing the descriptor returned releases it
    (:func:`_locked` without a generator, for the append of one item)."""
    lock_path = _lock_path(directory)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise _unavailable(lock_path, exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_TEMP_PREFIX, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    # The rename is durable only once the directory entry is flushed.
    _fsync_dir(path.parent)


def _make_dirs(directory: Path) -> None:
    if directory.is_dir():
        return
    _make_dirs(directory.parent)
    with contextlib.suppress(FileExistsError):
        directory.mkdir()
    _fsync_dir(directory.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _io(path: Path, *, pass_missing: bool = False) -> Iterator[None]:
    """Turn OS errors on ``path`` into :class:`StoreUnavailable`."""
    try:
        yield
    except OSError as exc:
        if pass_missing and isinstance(exc, FileNotFoundError):
            raise
        raise _unavailable(path, exc) from exc


def _unavailable(path: Path, exc: OSError) -> StoreUnavailable:
    return StoreUnavailable(
        f"local store cannot access {path}: {exc.strerror or exc}; check that the directory "
        "exists, is writable by this process and that the disk is not full"
    )


def _short(token: str | None) -> str:
    return "none (absent)" if token is None else token[:16]
