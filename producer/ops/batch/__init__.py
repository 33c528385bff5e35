"""Batch evaluation: run every case of a dataset on the workers, at most N at a time.

>>> summary = run_batch(producer, "cases.jsonl", agent="echo", concurrency=16)
>>> summary.by_status, summary.pass_rate

This module owns the entry points (:func:`run_batch`, :func:`run_batch_with`): the dataset read
and every case validated before anything is submitted, the batch id derived, the cases handed to
one invocation. The parts, from the bottom: ``cases`` (the case model and the JSONL cases file),
``sources`` (CSV, Parquet and Hugging Face datasets as cases), ``ids`` (derived ids),
``options``, ``scoring/`` and ``grading`` (scorers, and a case's own grader), ``records`` (a
finished case to its results line), ``results`` (the results file), ``line_scores``,
``metrics``, ``stats`` and ``summary`` (statistics), ``progress`` and ``boards/`` (the progress
bar, and the progress records the console shows), ``engine`` (the submit/complete loop),
``execution`` (one invocation), ``retry`` and ``compare`` (a batch run again, two compared),
``outputs/`` (reports and exports).

How it works:

- The cases file is validated first, streaming, and the batch refuses to start on a bad line
  (unless ``skip_invalid``). It is then streamed again; no case list is ever built.
- One thread (the caller's) submits and processes results. A window of at most ``concurrency``
  cases is in flight; a case is one run at a time (the turns of a multi-turn case run in order in
  one session, each submitted when the previous finished). Turns that are due together are
  submitted together, in one Redis round trip and one broker connection.
- Completions come from the producer's single completion listener (the thread behind
  :meth:`RunHandle.add_done_callback`), registered with a callback that only puts the result on a
  queue: no thread per case. The engine registers with the listener itself rather than through
  ``add_done_callback`` because a handle and its future's callback list form a reference cycle,
  which only the cyclic GC frees; over thousands of cases that garbage made peak memory grow
  with the case count. A run the listener reports lost (its record vanished) is submitted again
  with the same request id, which applies it at most once.
- Each finished case is appended to the results file at once. Request ids derive from
  ``(batch id, case id, turn)``, so running the batch again skips finished cases, and re-submits
  unfinished ones with the same request ids, which returns the original runs: an input is never
  applied twice (as long as run records live, ``TETHER_RESULT_TTL_S``, 7 days by default).
- Memory per case that stays: 8 bytes (finished-case hash, resume only) and 4 bytes (latency).
  Everything else is bounded by ``concurrency``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import InvalidInput
from tether.producer.ops.batch.cases import (
    BatchCase,
    CasesInvalid,
    CasesScan,
    check_agents,
    iter_cases,
    scan_cases,
    spool_cases,
)
from tether.producer.ops.batch.engine import Unit
from tether.producer.ops.batch.execution import BatchRun, batch_scorers
from tether.producer.ops.batch.ids import derive_batch_id
from tether.producer.ops.batch.options import BatchOptions
from tether.producer.ops.batch.scoring import Score, Scorer
from tether.producer.ops.batch.scoring.specs import scores_with_regex
from tether.producer.ops.batch.sources import (
    DatasetOptions,
    needs_spool,
    spool_dataset,
    unit_of,
)
from tether.producer.ops.batch.summary import BatchSummary

if TYPE_CHECKING:
    from rich.console import Console

    from tether.producer.client import Producer

CasesSource = str | os.PathLike[str] | Iterable[BatchCase | Mapping[str, Any] | str]


def run_batch(
    producer: Producer,
    cases: CasesSource,
    *,
    agent: str | None = None,
    concurrency: int = 8,
    out: str | os.PathLike[str] | None = None,
    batch_id: str | None = None,
    skip_invalid: bool = False,
    tenant: str | None = None,
    progress: bool = False,
    console: Console | None = None,
    fsync_interval_s: float = 1.0,
    epochs: int = 1,
    scorers: Sequence[str | Scorer] = (),
    dataset: DatasetOptions | None = None,
) -> BatchSummary:
    """Run a batch of cases; see the module docstring. Re-running resumes.

    Args:
        producer: the producer to submit with.
        cases: a dataset path (JSONL, CSV, Parquet, or a saved Hugging Face dataset's folder),
            or an iterable of cases (:class:`BatchCase`, dicts or JSON lines), which is first
            spooled to a temporary file.
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
        scorers: ``--scorer`` values or :class:`Scorer` objects (see
            :mod:`tether.producer.ops.batch.scoring.specs`).
        dataset: field mapping and row selection (:class:`DatasetOptions`).

    Raises:
        CasesInvalid: invalid lines and not ``skip_invalid``; nothing was submitted.
        InvalidInput: bad arguments (a scorer that does not import, a dataset field that does
            not exist...), or a results file of another batch; nothing was submitted.
    """
    options = BatchOptions(
        agent=agent,
        concurrency=concurrency,
        out=out,
        batch_id=batch_id,
        skip_invalid=skip_invalid,
        tenant=tenant,
        progress=progress,
        console=console,
        fsync_interval_s=fsync_interval_s,
        epochs=epochs,
        scorers=scorers,
        dataset=dataset or DatasetOptions(),
    )
    return run_batch_with(producer, cases, options)


def run_batch_with(producer: Producer, cases: CasesSource, options: BatchOptions) -> BatchSummary:
    """:func:`run_batch` with its keyword arguments gathered in one :class:`BatchOptions`.

    Args:
        producer: the producer to submit with.
        cases: a dataset path, or an iterable of cases (spooled to a temporary file).
        options: how to run the batch.

    Raises:
        CasesInvalid: invalid lines and not ``options.skip_invalid``; nothing was submitted.
        InvalidInput: bad options, a results file of another batch or other scorers, or no
            case to run (an empty file, or filters that select none); nothing was submitted.
    """
    options = options.checked(default_tenant=producer.settings.tenant)
    scorers = batch_scorers(producer, options.scorers)
    # with the regex scorer every expected is a pattern: one that does not compile is an
    # invalid line, found before anything runs (the same check for the scan and the run)
    patterns = scores_with_regex(scorers)
    max_bytes = producer.settings.max_input_bytes
    with ExitStack() as stack:
        path, source, unit = _cases_file(cases, options.dataset, stack)
        scan = _scan(path, source, options, max_bytes, unit, patterns)
        if scan.valid == 0:
            _refuse_no_cases(source, options, scan)
        batch_id = options.batch_id or derive_batch_id(scan.sha256, options.agent)
        out = Path(options.out) if options.out is not None else _default_out(source, batch_id)
        epochs = options.epochs

        def units() -> Iterator[Unit]:
            numbered = iter_cases(
                path,
                default_agent=options.agent,
                max_input_bytes=max_bytes,
                skip_lines=scan.duplicate_lines,
                regex_expected=patterns,
            )
            for case in numbered:
                for epoch in range(epochs):
                    yield Unit(case, epoch)

        run = BatchRun(producer, options, batch_id, scorers)
        # total: None counts the epochs the results file already holds too (cases x epochs)
        return run.execute(out, units(), total=None, cases=scan.valid, invalid_skipped=scan.invalid)


def _refuse_no_cases(source: Path | None, options: BatchOptions, scan: CasesScan) -> None:
    """An empty or blank cases file, or filters that select nothing, would run a batch of 0
    cases and report success: refuse it (nothing is submitted or written).

    Raises:
        InvalidInput: always.
    """
    where = str(source) if source is not None else "the cases given"
    why = []
    if options.dataset.selects:
        why.append("--filter, --sample or --limit selected none of its cases")
    if scan.invalid:
        why.append(f"{scan.invalid} invalid line(s) skipped")
    detail = f" ({'; '.join(why)})" if why else " (the file is empty or blank)"
    raise InvalidInput(f"no cases (after filters) in {where}{detail}; nothing was run")


def _cases_file(
    cases: CasesSource, dataset: DatasetOptions, stack: ExitStack
) -> tuple[Path, Path | None, str]:
    """The cases as a JSONL file, the source the caller named (None for an iterable), and what
    problems are numbered by (``line``, or ``row`` for CSV, Parquet and Hugging Face).

    An iterable, or a source to convert (:func:`needs_spool`), is spooled into a temporary
    directory that ``stack`` removes: scanning and running read the cases twice, without ever
    holding them all in memory.
    """
    if isinstance(cases, str | os.PathLike):
        path = Path(cases)
        if not path.exists():
            raise InvalidInput(f"cases file {path} does not exist")
        if not needs_spool(path, dataset):
            if not path.is_file():
                raise InvalidInput(f"cases file {path} is not a file")
            return path, path, "line"
        spooled = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "cases.jsonl"
        return spooled, path, unit_of(spool_dataset(path, dataset, spooled))
    path = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "cases.jsonl"
    spool_cases(cases, path)
    if dataset.maps_fields or dataset.selects:
        spooled = path.with_name("selected.jsonl")
        spool_dataset(path, dataset, spooled)
        return spooled, None, "line"
    return path, None, "line"


def _scan(
    path: Path,
    source: Path | None,
    options: BatchOptions,
    max_bytes: int,
    unit: str,
    patterns: bool,
) -> CasesScan:
    """Validate every case before anything is submitted (see :func:`scan_cases`)."""
    scan = scan_cases(
        path, default_agent=options.agent, max_input_bytes=max_bytes, regex_expected=patterns
    )
    if scan.invalid and not options.skip_invalid:
        raise CasesInvalid(source or Path("<cases>"), scan.problems, scan.invalid, unit)
    if options.known_agents is not None:
        wanted = scan.agents | ({options.agent} if options.agent else set())
        check_agents(wanted, options.known_agents)
    return scan


def _default_out(source: Path | None, batch_id: str) -> Path:
    if source is None:
        return Path(f"{batch_id}.results.jsonl")
    return source.with_name(f"{source.stem}.results.jsonl")


__all__ = [
    "BatchCase",
    "BatchOptions",
    "BatchSummary",
    "CasesInvalid",
    "CasesSource",
    "DatasetOptions",
    "Score",
    "Scorer",
    "run_batch",
    "run_batch_with",
]
