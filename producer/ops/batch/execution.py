"""One invocation of a batch: open the results file, run the units, summarise.

Shared by :func:`tether.producer.ops.batch.run_batch` (every case, every epoch) and
:func:`tether.producer.ops.batch.retry.retry_batch` (the errored ones, again). Also here: what
the judge's model client and the scorers' events are read with, both from the producer's settings
and both only when first needed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tether.producer.ops.batch.boards.redis import RedisBatchBoard
from tether.producer.ops.batch.boards.reporter import BatchReporter
from tether.producer.ops.batch.engine import BatchRunner, Unit
from tether.producer.ops.batch.progress import BatchProgress
from tether.producer.ops.batch.results import CaseResult, ResultsFile
from tether.producer.ops.batch.summary import BatchSummary, SummaryStats, build_summary
from tether.producer.ops.reachability import check_services

if TYPE_CHECKING:
    from tether.core.events import AgentEvent
    from tether.models.base import ModelClient
    from tether.persistence.reader import SessionLogReader
    from tether.producer.client import Producer
    from tether.producer.ops.batch.options import BatchOptions
    from tether.producer.ops.batch.scoring.base import Scorer


def judge_client_factory(producer: Producer) -> Callable[[], tuple[ModelClient, str]]:
    """Builds the judge's model client from the producer's ``TETHER_OPENAI_*`` settings."""

    def build() -> tuple[ModelClient, str]:
        from tether.models.openai import model_from_settings

        return model_from_settings(producer.settings), producer.settings.openai_model

    return build


def batch_scorers(producer: Producer, specs: Sequence[str | Scorer]) -> list[Scorer]:
    """The scorers of ``specs``, checked; a judge talks to the producer's model and prices its
    tokens at the producer's ``TETHER_MODEL_PRICES`` (the table the workers price runs at).

    Raises:
        InvalidInput: a value that does not parse or import, or a name given twice.
    """
    from tether.producer.ops.batch.scoring.specs import resolve_scorers
    from tether.runs.usage.policy import prices

    return resolve_scorers(
        specs, client_factory=judge_client_factory(producer), prices=prices(producer.settings)
    )


class EventsReader:
    """Reads the events of a case's runs from the session log (opened on first use)."""

    def __init__(self, producer: Producer, tenant: str) -> None:
        self.producer = producer
        self.tenant = tenant
        self._reader: SessionLogReader | None = None
        self._lock = threading.Lock()  # scorers read events from several scoring threads

    def __call__(self, session_id: str, run_ids: list[str]) -> list[AgentEvent]:
        with self._lock:
            reader = self._reader or self._open()
        wanted = set(run_ids)
        events = reader.events(session_id, tenant=self.tenant)
        return [e for e in events if e.run_id in wanted]

    def _open(self) -> SessionLogReader:
        if self._reader is None:
            from tether.persistence.reader import SessionLogReader
            from tether.persistence.storage_url import storage_from_settings

            store, archive = storage_from_settings(self.producer.settings)
            self._reader = SessionLogReader(store, archive)
        return self._reader


class BatchRun:
    """What one invocation needs besides its units: producer, options, batch id, scorers."""

    def __init__(
        self, producer: Producer, options: BatchOptions, batch_id: str, scorers: list[Scorer]
    ) -> None:
        self.producer = producer
        self.options = options
        self.batch_id = batch_id
        self.scorers = scorers

    def execute(
        self,
        out: Path,
        units: Iterator[Unit],
        *,
        total: int | None,
        cases: int,
        invalid_skipped: int = 0,
        seen: Callable[[CaseResult], None] | None = None,
    ) -> BatchSummary:
        """Run ``units`` into the results file ``out`` (resuming it) and summarise it.

        ``seen`` is also given every result already in the file (retry keeps its own count).
        ``total`` None: ``cases`` times the epochs, counting those the file already holds (a
        batch of 3 epochs re-run with ``--epochs 1`` still has 3).
        """
        options = self.options
        results, stats, resumed = self._open(out, seen)
        if total is None:
            total = cases * max(options.epochs, stats.metrics.max_epoch + 1)
        if resumed < total:  # work to do: fail at once, naming the service that is down
            try:
                check_services(self.producer.settings)
            except BaseException:
                results.close()  # and gone, when this batch created it
                raise
        reporter = self._reporter(out, total, stats)
        done = False
        started = time.monotonic()
        try:
            reporter.start()
            runner = self._run(units, results, stats, total, resumed, reporter)
            done = True
        finally:
            results.close()
            reporter.end(finished=done)
        return build_summary(
            stats,
            epochs=options.epochs,
            batch_id=self.batch_id,
            out=str(out),
            total=total,
            cases=cases,
            resumed=resumed,
            invalid_skipped=invalid_skipped,
            runs=runner.runs,
            wall_s=time.monotonic() - started,
            concurrency=options.concurrency,
            max_in_flight=runner.max_in_flight,
        )

    def _open(
        self, out: Path, seen: Callable[[CaseResult], None] | None
    ) -> tuple[ResultsFile, SummaryStats, int]:
        """The results file, opened for appending; the stats of the lines it already holds,
        and how many those are."""
        results = ResultsFile(
            out,
            self.batch_id,
            fsync_interval_s=self.options.fsync_interval_s,
            scorers=[s.name for s in self.scorers],
        )
        stats = SummaryStats()

        def existing(result: CaseResult) -> None:
            stats.add(result)
            if seen is not None:
                seen(result)

        return results, stats, results.open(existing)

    def _run(
        self,
        units: Iterator[Unit],
        results: ResultsFile,
        stats: SummaryStats,
        total: int,
        resumed: int,
        reporter: BatchReporter,
    ) -> BatchRunner:
        """Run every unit under the progress bar; the runner, for its counts."""
        options = self.options
        ui = BatchProgress(
            batch_id=self.batch_id,
            total=total,
            completed=resumed,
            failed=stats.failed,
            enabled=options.progress,
            console=options.console,
            on_case=reporter.tick,
        )
        runner = BatchRunner(
            self.producer,
            options,
            batch_id=self.batch_id,
            results=results,
            stats=stats,
            progress=ui,
            scorers=self.scorers,
            events=EventsReader(self.producer, options.tenant or ""),
        )
        with ui:
            runner.run(units)
        return runner

    def _reporter(self, out: Path, total: int, stats: SummaryStats) -> BatchReporter:
        """Keeps this batch's record on the namespace's board (the console's Batches page)."""
        settings = self.producer.settings
        board = RedisBatchBoard(
            self.producer.redis, self.producer.keys, ttl_s=settings.result_ttl_s
        )
        return BatchReporter(
            board,
            tenant=self.options.tenant or settings.tenant,
            batch_id=self.batch_id,
            results=out,
            total=total,
            stats=stats,
        )


__all__ = ["BatchRun", "EventsReader", "batch_scorers", "judge_client_factory"]
