"""The batch board seam: a batch's progress record, and where records are put and listed."""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field


class BatchState(StrEnum):
    """Where a batch is: running, finished (every unit ran), or stopped early (an error or an
    interrupt; running it again resumes it)."""

    RUNNING = "running"
    FINISHED = "finished"
    STOPPED = "stopped"


#: Version 1: the fields below.
BATCH_RECORD_VERSION: Literal[1] = 1


class BatchRecord(BaseModel):
    """What a batch says about itself while it runs and once it ends.

    ``results_path`` is the absolute path of its results file on the producer's machine (the
    console makes the report from it when it can read it and its lines say they are this
    batch's of the console's tenant: the record is the tenant's word, not a fact);
    ``finished`` counts result lines (cases x epochs, earlier invocations included) out of
    ``total``.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: Literal[1] = BATCH_RECORD_VERSION
    batch_id: str
    tenant: str
    results_path: str
    state: BatchState = BatchState.RUNNING
    total: int = Field(ge=0)
    finished: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    graded: int = Field(default=0, ge=0)
    passed: int = Field(default=0, ge=0)
    started_at_ms: int
    updated_at_ms: int = Field(default_factory=lambda: int(time.time() * 1000))
    host: str = ""
    pid: int = 0

    @property
    def pass_rate(self) -> float | None:
        """passed / graded, or None when nothing was graded yet."""
        return self.passed / self.graded if self.graded else None

    @property
    def progress(self) -> float:
        """finished / total (1.0 for an empty batch)."""
        return min(1.0, self.finished / self.total) if self.total else 1.0


class BatchBoard(Protocol):
    """Where batches put their records and consoles list them."""

    def put(self, record: BatchRecord) -> None:
        """Store (replace) the record of ``record.batch_id`` in ``record.tenant``."""
        ...

    def get(self, tenant: str, batch_id: str) -> BatchRecord | None:
        """The record of one batch, or None (never put, or expired)."""
        ...

    def list(self, tenant: str, *, limit: int = 100) -> list[BatchRecord]:
        """The tenant's records, the most recently updated first."""
        ...


__all__ = ["BATCH_RECORD_VERSION", "BatchBoard", "BatchRecord", "BatchState"]
