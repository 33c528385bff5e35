"""The options of one batch invocation, shared by the CLI, :func:`run_batch` and the engine."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tether.errors import InvalidInput
from tether.ids import validate_tenant
from tether.producer.ops.batch.ids import check_batch_id
from tether.producer.ops.batch.sources import DatasetOptions

if TYPE_CHECKING:
    from rich.console import Console

    from tether.producer.ops.batch.scoring.base import Scorer

#: The most cases a batch may keep in flight.
MAX_CONCURRENCY = 100_000
#: The most epochs (runs of each case) a batch may ask for.
MAX_EPOCHS = 1000


@dataclass(frozen=True)
class BatchOptions:
    """How to run a batch: the keyword arguments of :func:`tether.producer.ops.batch.run_batch`.

    Building one checks nothing; :meth:`checked` does, before the batch touches any file.

    Attributes:
        agent: the agent of cases that name none.
        concurrency: the most cases in flight at once.
        out: the results file (default: ``<cases stem>.results.jsonl`` next to the cases file,
            or ``<batch id>.results.jsonl`` in the working directory for an iterable).
        batch_id: the batch id (default: derived from the cases' content and ``agent``, so the
            same command resumes the same batch).
        skip_invalid: run the valid cases when some lines are invalid (else refuse to start).
        tenant: the tenant (default: the producer's).
        progress: show a progress bar on stderr.
        console: where to draw the progress bar.
        fsync_interval_s: fsync the results file at most this often (lines are flushed always).
        epochs: runs of every case, each in a fresh session.
        scorers: ``--scorer`` values (or :class:`Scorer` objects), applied to every case.
        dataset: field mapping and row selection of the cases source.
        known_agents: the agents the workers know; a batch naming another (``agent`` or a
            case's own) is refused before anything is submitted or written. None: not checked
            (the Python API's default: each case of an unknown agent fails ``UnknownAgent``).
    """

    agent: str | None = None
    concurrency: int = 8
    out: str | os.PathLike[str] | None = None
    batch_id: str | None = None
    skip_invalid: bool = False
    tenant: str | None = None
    progress: bool = False
    console: Console | None = None
    fsync_interval_s: float = 1.0
    epochs: int = 1
    scorers: Sequence[str | Scorer] = ()
    dataset: DatasetOptions = field(default_factory=DatasetOptions)
    known_agents: frozenset[str] | None = None

    def checked(self, default_tenant: str) -> BatchOptions:
        """These options validated, with the tenant filled in from ``default_tenant``.

        Raises:
            InvalidInput: a concurrency out of range, or a malformed tenant or batch id.
        """
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise InvalidInput(f"concurrency must be 1..{MAX_CONCURRENCY}, got {self.concurrency}")
        if not 1 <= self.epochs <= MAX_EPOCHS:
            raise InvalidInput(f"epochs must be 1..{MAX_EPOCHS}, got {self.epochs}")
        self.dataset.check()
        tenant = validate_tenant(self.tenant or default_tenant)
        if self.batch_id is not None:
            check_batch_id(self.batch_id)
        return replace(self, tenant=tenant)


__all__ = ["MAX_CONCURRENCY", "MAX_EPOCHS", "BatchOptions"]
