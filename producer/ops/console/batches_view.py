"""The batches a console shows: the progress records batches keep on the tenant's board in
Redis (:mod:`tether.producer.ops.batch.boards`), and each batch's report, made on demand from
its results file when this console can read it.

A record is written by the tenant's own producer with the tenant's own Redis credential, so its
``results_path`` is a claim, not a fact: a tenant can put any path there, another tenant's
results file or ``/etc/passwd``. The console therefore reads a file only when it is a non-empty
regular file (no link, device, FIFO or empty ``/proc`` entry) whose own lines say they are this
batch's (their ``batch_id``) and, when they name one, of the console's tenant. Every other file
answers exactly as a missing one does, so a record can neither make the console serve another
tenant's report nor tell whether a path exists on the console's machine.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pydantic

from tether.errors import InvalidInput
from tether.producer.ops.batch.boards.base import BatchRecord, BatchState
from tether.producer.ops.batch.boards.redis import RedisBatchBoard
from tether.producer.ops.batch.results import CaseResult
from tether.producer.ops.console.backends import Backends

#: A running batch whose record is older than this is shown as silent (its producer may be gone).
SILENT_AFTER_S = 30.0
#: The longest first line read to tell whose file it is (a case's output can be long).
MAX_LINE_BYTES = 16 * 1024 * 1024
#: The largest results file the console makes a report of (the report is built in memory).
MAX_REPORT_BYTES = 256 * 1024 * 1024

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _regular(path_text: str) -> os.stat_result | None:
    """The status of ``path_text`` when it is a non-empty regular file named by an absolute
    path (checked without opening it: opening a device or a FIFO can act or block)."""
    if not os.path.isabs(path_text):
        return None  # batches record absolute paths; a relative one would be the console's cwd
    try:
        status = os.lstat(path_text)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    return status if stat.S_ISREG(status.st_mode) and status.st_size > 0 else None


@contextlib.contextmanager
def _open_regular(path_text: str) -> Iterator[BinaryIO | None]:
    """``path_text`` opened for reading when it is a non-empty regular file, else None.

    The file is opened without following a link and checked again once open, so a file
    swapped for a link or a device between the check and the open is refused too.
    """
    before = _regular(path_text)
    fd = -1
    if before is not None:
        with contextlib.suppress(OSError):
            fd = os.open(path_text, _OPEN_FLAGS)
    if before is None or fd < 0:
        yield None
        return
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(
        opened.st_mode
    ):
        os.close(fd)
        yield None
        return
    with os.fdopen(fd, "rb") as fh:
        yield fh


def _batch_line(raw: bytes, batch_id: str, tenant: str) -> CaseResult | None:
    """The results line ``raw`` when it is one of batch ``batch_id`` of ``tenant`` (a line
    that names no tenant was written before lines carried one: its batch id decides)."""
    try:
        line = CaseResult.model_validate_json(raw)
    except pydantic.ValidationError:
        return None
    if line.batch_id != batch_id or (line.tenant is not None and line.tenant != tenant):
        return None
    return line


def _first_line(fh: BinaryIO) -> bytes | None:
    """The first complete, non-blank line (None: none within :data:`MAX_LINE_BYTES`)."""
    while True:
        raw = fh.readline(MAX_LINE_BYTES + 1)
        if not raw.endswith(b"\n"):
            return None  # end of file, a line still being written, or an overlong line
        if raw.strip():
            return raw


def _starts_as_batch(fh: BinaryIO, batch_id: str, tenant: str) -> bool:
    """Whether the first line of ``fh`` is one of batch ``batch_id`` of ``tenant`` (cheap
    enough for every row of the Batches page; the report then checks every line)."""
    first = _first_line(fh)
    return first is not None and _batch_line(first, batch_id, tenant) is not None


def _is_batch_file(path_text: str, batch_id: str, tenant: str) -> bool:
    """Whether ``path_text`` is a results file of batch ``batch_id`` of ``tenant``, by its first
    line: the Batches page links a report only then."""
    with _open_regular(path_text) as fh:
        return fh is not None and _starts_as_batch(fh, batch_id, tenant)


def _read_batch_lines(fh: BinaryIO, batch_id: str, tenant: str) -> list[CaseResult] | None:
    """Every complete line of ``fh`` (a trailing partial line is a case still being written),
    or None when one is not a line of batch ``batch_id`` of ``tenant`` or there is none."""
    lines = []
    for raw in fh:
        if not raw.endswith(b"\n") or not raw.strip():
            continue
        line = _batch_line(raw, batch_id, tenant)
        if line is None:
            return None
        lines.append(line)
    return lines or None


@dataclass(frozen=True)
class BatchRow:
    """One batch of the Batches page."""

    record: BatchRecord
    state: str
    """``running``, ``finished``, ``stopped``, or ``silent`` (running, no update lately)."""
    percent: float
    updated_s_ago: float
    report: bool
    """Its results file is readable here and is this batch's, so the page links its report."""


def board(b: Backends) -> RedisBatchBoard:
    """The namespace's batch board."""
    return RedisBatchBoard(b.client, b.keys, ttl_s=b.settings.result_ttl_s)


def list_batch_rows(b: Backends, tenant: str) -> list[BatchRow]:
    """The tenant's batches, the most recently updated first."""
    now_ms = int(time.time() * 1000)
    rows = []
    for record in board(b).list(tenant):
        ago_s = max(0.0, (now_ms - record.updated_at_ms) / 1000)
        state = record.state.value
        if record.state is BatchState.RUNNING and ago_s > SILENT_AFTER_S:
            state = "silent"
        report = _is_batch_file(record.results_path, record.batch_id, tenant)
        rows.append(BatchRow(record, state, 100 * record.progress, ago_s, report))
    return rows


def _not_here(batch_id: str, tenant: str, path: str) -> InvalidInput:
    # one message for a missing file and for a file that is not this batch's: the answer must
    # not tell a record's author whether a path exists on the console's machine
    return InvalidInput(
        f"no results file of batch {batch_id!r} of tenant {tenant!r} at {path} on this "
        f"console's machine (it is elsewhere, or the file there is not this batch's); "
        f"run 'tether batch report {path} -o report.html' where the batch wrote it"
    )


def batch_lines(batch_id: str, tenant: str, path: str) -> list[CaseResult]:
    """The lines of the results file at ``path``, checked to be batch ``batch_id``'s of
    ``tenant``: see the module's docstring.

    Raises:
        InvalidInput: no such file here, or not this batch's (one message for both), or it is
            too large for the console; the message says where to make the report instead.
    """
    with _open_regular(path) as fh:
        if fh is None or not _starts_as_batch(fh, batch_id, tenant):
            raise _not_here(batch_id, tenant, path)
        # the size only once the file is known to be this batch's: no probe of other files
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_REPORT_BYTES:
            raise InvalidInput(
                f"the results file of batch {batch_id!r}, {path}, is {size} bytes, more than "
                f"the console reads ({MAX_REPORT_BYTES}); run 'tether batch report {path} "
                "-o report.html' instead"
            )
        fh.seek(0)
        lines = _read_batch_lines(fh, batch_id, tenant)
    if lines is None:
        raise _not_here(batch_id, tenant, path)
    return lines


def batch_report_html(b: Backends, tenant: str, batch_id: str) -> str | None:
    """The HTML report of one batch, made now from its results file (None: no such batch).

    Raises:
        InvalidInput: its results file is not readable from this console, or is not this
            batch's of ``tenant`` (the same message for both); the message names the path and
            the command to run where it is.
    """
    from tether.producer.ops.batch.outputs.report_data import build_report_data
    from tether.producer.ops.batch.outputs.report_html import render_report
    from tether.producer.ops.batch.outputs.transcripts import case_events

    record = board(b).get(tenant, batch_id)
    if record is None:
        return None
    lines = batch_lines(batch_id, tenant, record.results_path)
    data = build_report_data(
        Path(record.results_path),
        lambda result: case_events(b.reader, result, tenant),
        lines=lines,
    )
    return render_report(data)


__all__ = ["SILENT_AFTER_S", "BatchRow", "batch_lines", "batch_report_html", "list_batch_rows"]
