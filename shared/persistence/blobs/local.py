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

Files are created with mode 0600 (sessions may hold private data); run every process that
shares a root as the same user. Needs POSIX ``flock`` (Linux, macOS; not Windows).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from tether.errors import InvalidInput, StoreUnavailable, VersionConflict
from tether.persistence.blobs import Blob, local_log
from tether.persistence.codec import sha256_hex
from tether.persistence.objects import listing_order

LogPolicy = Callable[[bytes, bytes], bool]
"""Whether an update may go to the update log, given the object file's bytes and the new ones."""

LOCK_NAME = ".lock"
_TEMP_PREFIX = ".tmp-"


class LocalBlobs:
    """Objects as files under ``root``; key ``a/b/c`` is the file ``root/a/b/c``."""

    def __init__(
        self, root: str | os.PathLike[str], *, update_log: bool | LogPolicy = False
    ) -> None:
        """Args:
        root: the directory holding the objects (created on first write).
        update_log: append updates of existing small objects to their update log (one sync
            each) instead of replacing the file (two): always, never, or when a policy given
            the object file's bytes and the new ones says so.
        """
        self.root = Path(os.path.abspath(root))
        self.update_log = update_log

    def describe(self, key: str) -> str:
        return str(self._path(key))

    def get(self, key: str) -> Blob | None:
        path = self._path(key)
        data, _, _ = self._current(path)
        return None if data is None else Blob(data, sha256_hex(data))

    def _current(self, path: Path) -> tuple[bytes | None, bytes | None, local_log.LogTail]:
        """The current bytes of ``path``, its object file's bytes, and its update log."""
        base = _read(path)
        if base is None:
            return None, None, local_log.LogTail(None, 0)
        with _io(path):
            tail = local_log.read_tail(path, base)
        return (base if tail.record is None else tail.record), base, tail

    def put(self, key: str, data: bytes, *, expected: str | None) -> str:
        path = self._path(key)
        with _io(path.parent):
            _make_dirs(path.parent)
        with _locked(path.parent):
            current, base, tail = self._current(path)
            current_token = None if current is None else sha256_hex(current)
            if current_token != expected:
                raise VersionConflict(
                    f"{path} is at version {_short(current_token)}, expected "
                    f"{_short(expected)}; reload it and retry"
                )
            with _io(path):
                self._write(path, data, base, tail)
        return sha256_hex(data)

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
        if (
            base is not None
            and max(len(data), len(base)) <= local_log.LOG_MAX_RECORD_BYTES
            and max(tail.end, len(local_log.header(base))) + size <= local_log.LOG_MAX_BYTES
            and (self.update_log(base, data) if callable(self.update_log) else self.update_log)
        ):
            if tail.end:
                local_log.append(path, tail.end, data)
            else:  # no log extends this file yet: start one (a new file: synced like one)
                _atomic_write(logged, local_log.header(base) + local_log.record(data))
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
        parts = key.split("/")
        # Keys are built from validated ids; this is a second line against path traversal.
        if any(part in ("", ".", "..") for part in parts):
            raise InvalidInput(f"object key {key!r} is not a plain relative path")
        return self.root.joinpath(*parts)

    def _dir(self, prefix: str) -> Path:
        return self._path(prefix.rstrip("/"))


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise _unavailable(path, exc) from exc


def _scan(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise _unavailable(directory, exc) from exc


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Hold the exclusive lock of ``directory`` (threads and processes alike)."""
    lock_path = directory / LOCK_NAME
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise _unavailable(lock_path, exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


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
