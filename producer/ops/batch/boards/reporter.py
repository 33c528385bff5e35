"""What a running batch writes to its board: a record at the start, at most one a second as
cases finish, and the final state at the end. A board that fails (Redis away) never stops the
batch: the record is only for people watching."""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import TYPE_CHECKING

from tether.producer.ops.batch.boards.base import BatchBoard, BatchRecord, BatchState

if TYPE_CHECKING:
    from pathlib import Path

    from tether.producer.ops.batch.summary import SummaryStats

log = logging.getLogger(__name__)

#: At most one record a second while the batch runs.
UPDATE_INTERVAL_S = 1.0


class BatchReporter:
    """Puts the progress of one batch invocation on a board, from its running stats."""

    def __init__(
        self,
        board: BatchBoard,
        *,
        tenant: str,
        batch_id: str,
        results: Path,
        total: int,
        stats: SummaryStats,
        interval_s: float = UPDATE_INTERVAL_S,
    ) -> None:
        self.board = board
        self.stats = stats
        self.interval_s = interval_s
        self._last = 0.0
        self._failed_once = False
        self._base = BatchRecord(
            batch_id=batch_id,
            tenant=tenant,
            results_path=str(results.resolve()),
            total=total,
            started_at_ms=int(time.time() * 1000),
            host=socket.gethostname(),
            pid=os.getpid(),
        )

    def record(self, state: BatchState = BatchState.RUNNING) -> BatchRecord:
        """The record as of now."""
        s = self.stats
        return self._base.model_copy(
            update={
                "state": state,
                "finished": s.finished,
                "failed": s.failed,
                "graded": s.graded,
                "passed": s.passed,
                "updated_at_ms": int(time.time() * 1000),
            }
        )

    def tick(self) -> None:
        """A case finished: put the record when the last one is a second old."""
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            self._put(self.record())
            self._last = now

    def start(self) -> None:
        """Put the first record."""
        self._put(self.record())
        self._last = time.monotonic()

    def end(self, *, finished: bool) -> None:
        """Put the final record: finished, or stopped early."""
        self._put(self.record(BatchState.FINISHED if finished else BatchState.STOPPED))

    def _put(self, record: BatchRecord) -> None:
        try:
            self.board.put(record)
        except Exception as exc:  # the board is for watchers: the batch goes on
            if not self._failed_once:
                log.warning("batch %s: cannot update its progress record: %s", record.batch_id, exc)
                self._failed_once = True


__all__ = ["UPDATE_INTERVAL_S", "BatchReporter"]
