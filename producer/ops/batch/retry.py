"""``tether batch retry RESULTS``: run the errored cases again and keep the rest.

A case (epoch) errored when its run failed or was cancelled (an infrastructure, model or agent
error, or a usage error such as an unknown agent): failed grading is not an error and is kept.
Each errored case runs again as retry attempt ``a + 1`` (``a`` is its line's ``attempt``) in a
fresh session, with request ids that carry the attempt (see :mod:`tether.producer.ops.batch.ids`),
so the failed run is not simply returned again, and a retry that is itself interrupted resumes
exactly: its finished cases are in ``RESULTS.retry`` (the side file), the others are re-attached
through their request ids.

When every errored case has a new line, the side file's lines replace the errored lines in
RESULTS (written to a temporary file, then renamed over it: RESULTS is never half-written) and
the side file is removed. The cases come from the results lines themselves (``input``,
``expected``, ``tags``, the scorers), so version-1 results files, which do not hold inputs,
cannot be retried. With ``TETHER_REDACT_INPUTS`` those lines hold the masked texts
(:func:`tether.producer.ops.batch.records.mask_line`): a retried case whose input or
``expected`` held a credential runs and is scored with the mask in its place (the agent sees
the same masked input either way; only the reference differs from the first run's).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tether.errors import InvalidInput
from tether.producer.ops.batch.cases import BatchCase, Grader, NumberedCase, check_agents
from tether.producer.ops.batch.engine import Unit
from tether.producer.ops.batch.execution import BatchRun, batch_scorers
from tether.producer.ops.batch.ids import case_session_id
from tether.producer.ops.batch.results import CaseResult, dump_line, read_results
from tether.producer.ops.batch.summary import BatchSummary, SummaryStats, build_summary

if TYPE_CHECKING:
    from tether.producer.client import Producer
    from tether.producer.ops.batch.options import BatchOptions
    from tether.producer.ops.batch.scoring.base import Scorer


def side_file(path: Path) -> Path:
    """Where a retry of ``path`` writes its new lines until it merges them."""
    return path.with_name(path.name + ".retry")


def case_of(record: CaseResult, *, agent: str | None = None) -> BatchCase:
    """The case a results line ran (from the line's input, expected, tags and metadata), with
    ``agent`` instead of the line's when given."""
    if record.input is None:
        raise InvalidInput(
            f"case {record.id!r} has no input in its results line (a version-1 results file); "
            "run the batch again instead of retrying it"
        )
    fields: dict[str, object] = {
        "id": record.id,
        "input": record.input,
        "agent": agent or record.agent,
        "expected": record.expected,
        "tags": record.tags or [],
        "metadata": record.metadata or {},
    }
    if record.grader is not None:
        fields["grader"] = Grader(record.grader)
    case = BatchCase.model_validate(fields)
    derived = case_session_id(record.batch_id, case, record.epoch, record.attempt)
    if derived != record.session_id:  # the case named its own session: strip the epoch suffix
        own = record.session_id
        suffix = derived[len(case_session_id(record.batch_id, case)) :]
        case = case.model_copy(update={"session_id": own[: len(own) - len(suffix)] or own})
    return case


def _batch_scorers(records: list[CaseResult]) -> list[str]:
    """The ``--scorer`` values the batch ran with (a line's scorers less its own grader)."""
    for record in records:
        if record.scorers is not None:
            return [s for s in record.scorers if s != record.grader]
    return []


def retry_batch(
    producer: Producer, results: str | os.PathLike[str], options: BatchOptions
) -> BatchSummary:
    """Run the errored cases of a results file again; see the module docstring.

    ``options`` gives the concurrency, tenant and progress bar, ``scorers`` (default: those the
    batch ran with), ``agent`` (default: each case's own: given, it replaces the agent of every
    retried case, to correct a batch run with the wrong one) and ``known_agents`` (checked
    before anything runs); its other fields are ignored.

    Raises:
        InvalidInput: no such results file, a version-1 file, or another process writes it.
        UnknownAgent: a retried case's agent is not in ``options.known_agents``.
    """
    path = Path(results)
    records = read_results(path)
    if not records:
        raise InvalidInput(f"results file {path} holds no results; nothing to retry")
    batch_id = records[0].batch_id
    options = options.checked(default_tenant=producer.settings.tenant)
    scorers = _retry_scorers(producer, path, records, options)
    units = [
        Unit(NumberedCase(r.line, case_of(r, agent=options.agent)), r.epoch, r.attempt + 1)
        for r in records
        if r.errored
    ]
    if options.known_agents is not None:
        check_agents({u.numbered.case.agent or "" for u in units}, options.known_agents)
    epochs = max(r.epoch for r in records) + 1
    with _exclusive(path):
        side = side_file(path)
        run = BatchRun(producer, replace(options, epochs=epochs), batch_id, scorers)
        done = run.execute(side, iter(units), total=len(units), cases=len(units))
        merged = _merge(path, side, records, units)
    return _summary(path, records, merged, done, retried=len(units), epochs=epochs)


def _retry_scorers(
    producer: Producer, path: Path, records: list[CaseResult], options: BatchOptions
) -> list[Scorer]:
    """The scorers the batch ran with; ``--scorer`` may name them again, never others."""
    specs = list(options.scorers) or _batch_scorers(records)
    scorers = batch_scorers(producer, specs)
    ran_with = set(_batch_scorers(records))
    if options.scorers and {s.name for s in scorers} != ran_with:
        # the retried lines would go into the file beside lines scored by the others, and the
        # summary would mix them as one batch's scores
        raise InvalidInput(
            f"results file {path} was scored by {sorted(ran_with) or 'no scorer'}; a retry "
            f"scores with those, not {sorted(s.name for s in scorers)}: leave out --scorer, or "
            "run a new batch (another --out) to score with others"
        )
    return scorers


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """Hold the results file's lock: one process writes a batch's results at a time."""
    with path.open("a+b") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise InvalidInput(
                f"results file {path} is being written by a batch process; wait for it to end"
            ) from exc
        yield


def _merge(
    path: Path, side: Path, records: list[CaseResult], units: list[Unit]
) -> list[CaseResult]:
    """The file's lines with the retried ones in place; written over ``path`` (and the side
    file removed) only once every retried case has its new line."""
    # no side file: no retried case ended (it is removed when it got no line)
    fresh = {(r.id, r.epoch): r for r in read_results(side)} if side.exists() else {}
    merged = [fresh.get((r.id, r.epoch), r) for r in records]
    if all((u.numbered.case.id, u.epoch) in fresh for u in units):
        _replace_lines(path, merged)
        side.unlink(missing_ok=True)
    return merged


def _summary(
    path: Path,
    records: list[CaseResult],
    merged: list[CaseResult],
    done: BatchSummary,
    *,
    retried: int,
    epochs: int,
) -> BatchSummary:
    """The whole file's summary after the retry, with this invocation's runs and timings."""
    stats = SummaryStats()
    for record in merged:
        stats.add(record)
    fields = {
        k: v
        for k, v in done.to_dict().items()
        if k in ("runs", "wall_s", "concurrency", "max_in_flight")
    }
    return build_summary(
        stats,
        epochs=epochs,
        batch_id=records[0].batch_id,
        out=str(path),
        total=len(records),
        cases=len({r.id for r in records}),
        resumed=len(records) - retried,
        invalid_skipped=0,
        retried=retried,
        **fields,
    )


def _replace_lines(path: Path, records: list[CaseResult]) -> None:
    """Write ``records`` over ``path`` atomically (a temporary file renamed over it)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.writelines(dump_line(r) for r in records)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


__all__ = ["case_of", "retry_batch", "side_file"]
