"""Summary statistics of a batch, accumulated while streaming results, and their rendering.

Memory: counters are constant size; latencies are kept exactly, as a compact array of unsigned
32-bit milliseconds (4 bytes a case: 40 kB for 10,000 cases, 4 MB for a million), sorted once at
the end for exact percentiles. Results themselves are never kept: they are in the results file.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tether.producer.ops.batch.line_scores import line_score, scorer_outcomes
from tether.producer.ops.batch.metrics import EpochMetrics
from tether.producer.ops.batch.results import CaseResult
from tether.runtime.redaction import mask_input

_MAX_U32 = 2**32 - 1
FAILED_STATUSES = ("FAILED", "CANCELLED")
#: Error types whose first message a summary keeps (the rest are only counted by kind).
MAX_ERROR_TYPES = 5
#: How much of that message it keeps, and how much the table shows.
MAX_EXAMPLE_CHARS = 500
SHOWN_EXAMPLE_CHARS = 120


def percentile(sorted_values: list[int], q: float) -> int | None:
    """Nearest-rank percentile (``q`` in 0..1) of ascending values; None when empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


class SummaryStats:
    """Streaming accumulator of case results."""

    def __init__(self) -> None:
        self.by_status: Counter[str] = Counter()
        self.graded = 0
        self.passed = 0
        self.tokens = 0
        self.cost_usd = 0.0
        self.unpriced = 0
        self.steps = 0
        self.latencies_ms = array("I")
        self.metrics = EpochMetrics()
        self.scoring_errors = 0
        self.scorer_tokens = 0
        self.scorer_cost_usd = 0.0
        self.errors_by_kind: Counter[str] = Counter()
        self.errors_by_type: Counter[str] = Counter()
        self.error_examples: dict[str, str] = {}

    def add(self, result: CaseResult) -> None:
        """Count one finished case (one epoch of it)."""
        self.by_status[result.status] += 1
        if result.passed is not None:
            self.graded += 1
            self.passed += int(result.passed)
        self.tokens += result.tokens
        self.cost_usd += result.cost_usd or 0.0
        self.unpriced += int(result.cost_usd is None and result.tokens > 0)
        self.steps += result.steps
        self.latencies_ms.append(min(max(result.latency_ms, 0), _MAX_U32))
        if result.errored:
            self.errors_by_kind[result.error_kind or "other"] += 1
            kind = result.error_type or "other"
            self.errors_by_type[kind] += 1
            if kind not in self.error_examples and len(self.error_examples) < MAX_ERROR_TYPES:
                # masked like results lines: the summary is printed and saved as JSON too
                self.error_examples[kind] = mask_input(result.error or "")[:MAX_EXAMPLE_CHARS]
        records = (result.scores or {}).values()
        self.scoring_errors += result.scoring_errors
        usages = [r.usage for r in records if r.usage is not None]
        self.scorer_tokens += sum(u.total_tokens for u in usages)
        self.scorer_cost_usd += math.fsum(u.cost_usd or 0.0 for u in usages)
        # a failed run and a scoring error score 0, as compare and pass@k count them
        self.metrics.add(
            result.id,
            result.epoch,
            passed=result.passed,
            score=line_score(result),
            scorer_results=scorer_outcomes(result),
            tags=result.tags or (),
        )

    @property
    def finished(self) -> int:
        """Cases counted so far."""
        return sum(self.by_status.values())

    @property
    def failed(self) -> int:
        """Cases that failed or were cancelled."""
        return sum(self.by_status[s] for s in FAILED_STATUSES)


@dataclass(frozen=True)
class BatchSummary:
    """The outcome of a batch (covering cases finished by earlier, interrupted invocations too).

    Attributes:
        batch_id: the batch id (derived or given).
        out: the results file.
        total: valid cases in the cases file.
        finished: cases that have a result line now.
        resumed: cases already in the results file when this invocation started.
        invalid_skipped: invalid lines skipped (``skip_invalid``).
        by_status: finished cases by status of their last run.
        graded: finished cases that had an ``expected`` value; passed: how many of them passed.
        latency_p50_ms, latency_p95_ms, latency_max_ms: case latencies (None when no case).
        total_tokens, total_steps: summed over finished cases.
        runs: runs (turns) this invocation completed; wall_s: its wall time.
        concurrency: the in-flight cap; max_in_flight: the most cases in flight at once.
        epochs: runs of each case; cases: valid cases (``total`` is ``cases * epochs``).
        retried: errored cases ``tether batch retry`` ran again.
        scoring_errors: scorer failures (each a case's scoring error; the batch went on).
        scorer_tokens: tokens the scorers spent (a judge's calls); scorer_cost_usd: what they
            cost at the producer's ``TETHER_MODEL_PRICES`` (0 when the judge's model is
            unpriced), included in ``total_cost_usd``.
        errors_by_kind: errored cases by ``error_kind`` (``other`` for unknown error types).
        metrics: mean, standard error and pass@k of the cases' verdicts (``overall``), of each
            scorer (``scorers``) and of the cases of each tag (``tags``); see
            :mod:`tether.producer.ops.batch.metrics`.
        total_cost_usd: the runs' cost summed over finished cases, at the workers'
            ``TETHER_MODEL_PRICES``, plus ``scorer_cost_usd``; unpriced_cases: cases whose runs
            had tokens but no price (counted as 0 in the total).
    """

    batch_id: str
    out: str
    total: int
    finished: int
    resumed: int
    invalid_skipped: int
    by_status: dict[str, int]
    graded: int
    passed: int
    latency_p50_ms: int | None
    latency_p95_ms: int | None
    latency_max_ms: int | None
    total_tokens: int
    total_steps: int
    runs: int
    wall_s: float
    concurrency: int
    max_in_flight: int
    epochs: int = 1
    cases: int = 0
    retried: int = 0
    scoring_errors: int = 0
    scorer_tokens: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    errors: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Errored cases by ``error_type`` (the first few types): ``count`` and the first case's
    message as ``example``, so a typo (an unknown agent) says so on the summary itself."""
    metrics: dict[str, Any] = field(default_factory=dict)
    total_cost_usd: float = 0.0
    unpriced_cases: int = 0
    scorer_cost_usd: float = 0.0

    @property
    def failed(self) -> int:
        """Cases whose last run failed or was cancelled."""
        return sum(self.by_status.get(s, 0) for s in FAILED_STATUSES)

    @property
    def not_passed(self) -> int:
        """Graded cases that did not pass."""
        return self.graded - self.passed

    @property
    def pass_rate(self) -> float | None:
        """passed / graded, or None when nothing was graded."""
        return self.passed / self.graded if self.graded else None

    @property
    def runs_per_s(self) -> float:
        """Runs this invocation completed per second of wall time."""
        return self.runs / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (with the derived rates)."""
        doc = asdict(self)
        doc["failed"] = self.failed
        doc["pass_rate"] = self.pass_rate
        doc["runs_per_s"] = round(self.runs_per_s, 2)
        doc["wall_s"] = round(self.wall_s, 3)
        return doc


def build_summary(stats: SummaryStats, *, epochs: int = 1, **fields: Any) -> BatchSummary:
    """Freeze the accumulated stats into a :class:`BatchSummary`."""
    ordered = sorted(stats.latencies_ms)
    epochs = max(epochs, stats.metrics.max_epoch + 1)
    metrics = {
        "overall": stats.metrics.overall(epochs).to_dict(),
        "scorers": {n: m.to_dict() for n, m in stats.metrics.by_scorer(epochs).items()},
        "tags": {n: m.to_dict() for n, m in stats.metrics.by_tag(epochs).items()},
    }
    return BatchSummary(
        epochs=epochs,
        scoring_errors=stats.scoring_errors,
        scorer_tokens=stats.scorer_tokens,
        errors_by_kind=dict(sorted(stats.errors_by_kind.items())),
        errors={
            kind: {"count": stats.errors_by_type[kind], "example": example}
            for kind, example in stats.error_examples.items()
        },
        metrics=metrics,
        finished=stats.finished,
        by_status=dict(sorted(stats.by_status.items())),
        graded=stats.graded,
        passed=stats.passed,
        latency_p50_ms=percentile(ordered, 0.50),
        latency_p95_ms=percentile(ordered, 0.95),
        latency_max_ms=ordered[-1] if ordered else None,
        total_tokens=stats.tokens,
        total_steps=stats.steps,
        total_cost_usd=round(stats.cost_usd + stats.scorer_cost_usd, 9),
        scorer_cost_usd=round(stats.scorer_cost_usd, 9),
        unpriced_cases=stats.unpriced,
        **fields,
    )


def summary_of_results(results: list[CaseResult], *, batch_id: str, out: str) -> BatchSummary:
    """The summary of result lines read back after their batch ran (for a report or a log): no
    run-time figures, so runs, wall time and concurrency are 0."""
    stats = SummaryStats()
    for result in results:
        stats.add(result)
    return build_summary(
        stats,
        batch_id=batch_id,
        out=out,
        total=len(results),
        resumed=0,
        invalid_skipped=0,
        runs=0,
        wall_s=0.0,
        concurrency=0,
        max_in_flight=0,
    )


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value:,} ms"


def _stat(stats: dict[str, Any]) -> str:
    mean, stderr = stats.get("mean"), stats.get("stderr")
    text = "-" if mean is None else f"{mean:.3f}"
    if stderr is not None:
        text += f" ± {stderr:.3f}"
    at_k = stats.get("pass_at_k") or {}
    if len(at_k) > 1:
        text += "  " + " ".join(f"pass@{k} {v:.3f}" for k, v in at_k.items())
    return text


def _render_metrics(table: Table, summary: BatchSummary) -> None:
    if summary.epochs > 1:
        table.add_row("epochs", f"{summary.epochs} (of {summary.cases:,} cases)")
    metrics = summary.metrics
    overall = metrics.get("overall") or {}
    if overall.get("mean") is not None:
        table.add_row("score (mean ± stderr)", _stat(overall))
    scorers = metrics.get("scorers") or {}
    if len(scorers) > 1 or summary.epochs > 1:
        for name, stats in scorers.items():
            table.add_row(f"  {name}", _stat(stats))
    for name, stats in (metrics.get("tags") or {}).items():
        table.add_row(f"  tag {name}", _stat(stats))
    if summary.scoring_errors:
        table.add_row("[red]scoring errors[/]", f"{summary.scoring_errors:,}")
    if summary.scorer_tokens:
        table.add_row("scorer tokens", f"{summary.scorer_tokens:,}")
    if summary.scorer_cost_usd:
        table.add_row("scorer cost", f"${summary.scorer_cost_usd:,.4f}")


def render_summary(summary: BatchSummary, console: Console | None = None) -> None:
    """Print the summary table."""
    table = Table(title=f"batch {summary.batch_id}", show_header=False, title_justify="left")
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    table.add_row("cases", f"{summary.finished:,} / {summary.total:,} finished")
    if summary.resumed:
        table.add_row("  resumed from results", f"{summary.resumed:,}")
    if summary.invalid_skipped:
        table.add_row("  invalid lines skipped", f"{summary.invalid_skipped:,}")
    for status, count in summary.by_status.items():
        style = "red" if status in FAILED_STATUSES else "green"
        table.add_row(f"  [{style}]{status}[/]", f"{count:,}")
    for kind, error in summary.errors.items():
        example = " ".join(str(error["example"]).split())[:SHOWN_EXAMPLE_CHARS]
        table.add_row(f"    [red]{escape(kind)}[/]", f"{error['count']:,}: {escape(example)}")
    if summary.pass_rate is not None:
        rate = f"{summary.passed:,} / {summary.graded:,} ({summary.pass_rate:.1%})"
        table.add_row("passed", rate)
    else:
        table.add_row("passed", "- (no case has 'expected')")
    _render_metrics(table, summary)
    table.add_row(
        "latency p50 / p95 / max",
        " / ".join(
            _ms(v) for v in (summary.latency_p50_ms, summary.latency_p95_ms, summary.latency_max_ms)
        ),
    )
    table.add_row("tokens", f"{summary.total_tokens:,}")
    unpriced = f" ({summary.unpriced_cases:,} cases unpriced)" if summary.unpriced_cases else ""
    table.add_row("cost", f"${summary.total_cost_usd:,.4f}{unpriced}")
    table.add_row("wall time", f"{summary.wall_s:.1f} s ({summary.runs_per_s:.1f} runs/s)")
    table.add_row("results", summary.out)
    (console or Console()).print(table)


__all__ = ["BatchSummary", "SummaryStats", "build_summary", "percentile", "render_summary"]
