"""What a batch report shows, computed from a results file: the summary (pass rate, mean ±
standard error, pass@k, tokens, cost), the statistics of each tag and scorer, the latency and
cost of every line, one row per line with its transcript, and, against another batch, the
comparison of :mod:`tether.producer.ops.batch.compare`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.producer.ops.batch.compare import EPSILON, Comparison, compare_results
from tether.producer.ops.batch.results import CaseResult, read_results
from tether.producer.ops.batch.summary import BatchSummary, summary_of_results

if TYPE_CHECKING:
    from tether.core.events import AgentEvent

#: Returns a line's transcript (its runs' events).
EventsOf = Callable[[CaseResult], "list[AgentEvent]"]


@dataclass(frozen=True)
class ReportData:
    """Everything the HTML report renders."""

    path: str
    batch_id: str
    agents: list[str]
    summary: BatchSummary
    cost_usd: float | None
    latencies_ms: list[int]
    costs_usd: list[float]
    rows: list[dict[str, Any]]
    transcripts: list[list[dict[str, Any]]]
    comparison: Comparison | None = None
    changes: dict[str, str] = field(default_factory=dict)


def _cost(result: CaseResult) -> float | None:
    """What the line cost: its runs and its scorers (a judge's calls), as the summary's total
    counts them; None when neither was priced."""
    judged = [r.usage.cost_usd for r in (result.scores or {}).values() if r.usage is not None]
    parts = [getattr(result, "cost_usd", None), *judged]
    priced = [float(p) for p in parts if isinstance(p, int | float)]
    return math.fsum(priced) if priced else None


def _row(index: int, result: CaseResult, change: str | None) -> dict[str, Any]:
    if result.errored:
        outcome = "errored"
    elif result.passed is None:
        outcome = "ungraded"
    else:
        outcome = "passed" if result.passed else "failed"
    return {
        "index": index,
        "id": result.id,
        "epoch": result.epoch,
        "status": result.status,
        "outcome": outcome,
        "score": result.score,
        "tags": result.tags or [],
        "latency_ms": result.latency_ms,
        "tokens": result.tokens,
        "cost_usd": _cost(result),
        "input": result.input if isinstance(result.input, str) else "\n".join(result.input or []),
        "expected": result.expected,
        "output": result.output,
        "error": None if result.error is None else f"{result.error_type}: {result.error}",
        "scores": {
            n: r.model_dump(mode="json", exclude_none=True)
            for n, r in (result.scores or {}).items()
        },
        "session_id": result.session_id,
        "change": change,
    }


def _changes(comparison: Comparison) -> dict[str, str]:
    def label(diff: float) -> str:
        if diff > EPSILON:
            return "improved"
        return "regressed" if diff < -EPSILON else "unchanged"

    return {cid: label(diff) for cid, diff in comparison.per_case.items()}


def build_report_data(
    results: Path,
    events_of: EventsOf,
    *,
    compare_to: Path | None = None,
    seed: int = 0,
    lines: list[CaseResult] | None = None,
) -> ReportData:
    """Read ``results`` (and the baseline ``compare_to``) into a :class:`ReportData`.

    ``lines``: the lines of ``results`` when the caller has read them already (the console
    reads and checks them itself, from the file it opened, before anything is shown).

    Raises:
        InvalidInput: a file is missing or not a results file, or the two share no case.
    """
    from tether.producer.ops.batch.outputs.transcripts import event_row

    if lines is None:
        lines = read_results(results)
    comparison = None
    changes: dict[str, str] = {}
    if compare_to is not None:
        comparison = compare_results(compare_to, results, seed=seed)
        changes = _changes(comparison)
    batch_id = lines[0].batch_id if lines else ""
    summary = summary_of_results(lines, batch_id=batch_id, out=str(results))
    costs = [c for c in (_cost(r) for r in lines) if c is not None]
    return ReportData(
        path=str(results),
        batch_id=summary.batch_id,
        agents=sorted({r.agent for r in lines}),
        summary=summary,
        cost_usd=math.fsum(costs) if costs else None,
        latencies_ms=[r.latency_ms for r in lines],
        costs_usd=costs,
        rows=[_row(i, r, changes.get(r.id)) for i, r in enumerate(lines)],
        transcripts=[[event_row(e) for e in events_of(r)] for r in lines],
        comparison=comparison,
        changes=changes,
    )


__all__ = ["EventsOf", "ReportData", "build_report_data"]
