"""The batches a console shows: the progress records batches keep on the tenant's board in
Redis (:mod:`tether.producer.ops.batch.boards`), and each batch's report, made on demand from
its results file when this console can read it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tether.errors import InvalidInput
from tether.producer.ops.batch.boards.base import BatchRecord, BatchState
from tether.producer.ops.batch.boards.redis import RedisBatchBoard
from tether.producer.ops.console.backends import Backends

#: A running batch whose record is older than this is shown as silent (its producer may be gone).
SILENT_AFTER_S = 30.0


@dataclass(frozen=True)
class BatchRow:
    """One batch of the Batches page."""

    record: BatchRecord
    state: str
    """``running``, ``finished``, ``stopped``, or ``silent`` (running, no update lately)."""
    percent: float
    updated_s_ago: float
    report: bool
    """Its results file is readable here, so the page links its report."""


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
        rows.append(
            BatchRow(
                record, state, 100 * record.progress, ago_s, Path(record.results_path).is_file()
            )
        )
    return rows


def batch_report_html(b: Backends, tenant: str, batch_id: str) -> str | None:
    """The HTML report of one batch, made now from its results file (None: no such batch).

    Raises:
        InvalidInput: its results file is not readable from this console (or not a results
            file); the message names the path and the command to run where it is.
    """
    from tether.producer.ops.batch.outputs.report_data import build_report_data
    from tether.producer.ops.batch.outputs.report_html import render_report
    from tether.producer.ops.batch.outputs.transcripts import case_events

    record = board(b).get(tenant, batch_id)
    if record is None:
        return None
    path = Path(record.results_path)
    if not path.is_file():
        raise InvalidInput(
            f"the results file of batch {batch_id!r}, {path}, is not on this console's machine; "
            f"run 'tether batch report {path} -o report.html' where it is"
        )
    data = build_report_data(path, lambda result: case_events(b.reader, result, tenant))
    return render_report(data)


__all__ = ["SILENT_AFTER_S", "BatchRow", "batch_report_html", "list_batch_rows"]
