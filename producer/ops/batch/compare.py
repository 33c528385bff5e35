"""``tether batch compare A B``: what changed between two batches run on the same cases.

Cases are matched by id; each side reduces a case's epochs to one value first. Per case, the
score is the mean over its epochs of the line's score (or of one scorer's value with
``scorer=``; a line whose run failed, and a scorer that errored, score 0:
:mod:`tether.producer.ops.batch.line_scores`, the rule the summary's means follow too).
Reported:

- per case: ``improved`` (B's score is higher), ``regressed`` (lower) or ``unchanged``;
- the mean score difference B - A with its paired bootstrap 95% interval (seeded, so the same
  files give the same interval);
- McNemar's exact test on pass/fail, one verdict per case on each side: a case passes when it
  passed in more than half of its epochs that have a verdict (a tie fails). The epochs of one
  case are not independent pairs: counting each would report significance that is not there
  (3 cases fixed in 10 epochs each gives p = 2e-9 over 30 "pairs", 0.25 over the 3 cases);
- the mean latency, tokens and (when the lines carry ``cost_usd``) cost of each side.

:func:`significant_regression` is the gate of ``--fail-if-regressed``: McNemar's test at
``alpha`` (default 0.05), or the bootstrap interval when no case has verdicts on both sides.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tether.errors import InvalidInput
from tether.producer.ops.batch.line_scores import line_score, scorer_passed, scorer_value
from tether.producer.ops.batch.results import CaseResult, read_results
from tether.producer.ops.batch.stats import DEFAULT_RESAMPLES, bootstrap_mean_ci, mcnemar_exact

#: Score differences smaller than this are "unchanged" (float noise of means).
EPSILON = 1e-9


def _line_score(record: CaseResult, scorer: str | None) -> float | None:
    return line_score(record) if scorer is None else scorer_value(record, scorer)


def _line_passed(record: CaseResult, scorer: str | None) -> bool | None:
    return record.passed if scorer is None else scorer_passed(record, scorer)


@dataclass(frozen=True)
class Side:
    """Totals of one results file."""

    path: str
    lines: int
    latency_mean_ms: float | None
    tokens: int
    cost_usd: float | None


def _side(path: Path, records: list[CaseResult]) -> Side:
    latencies = [r.latency_ms for r in records]
    costs = [c for c in (getattr(r, "cost_usd", None) for r in records) if c is not None]
    return Side(
        path=str(path),
        lines=len(records),
        latency_mean_ms=math.fsum(latencies) / len(latencies) if latencies else None,
        tokens=sum(r.tokens for r in records),
        cost_usd=math.fsum(float(c) for c in costs) if costs else None,
    )


@dataclass(frozen=True)
class Comparison:
    """The outcome of comparing A with B (see the module docstring)."""

    a: Side
    b: Side
    scorer: str | None
    cases: int
    improved: list[str]
    regressed: list[str]
    unchanged: int
    only_in_a: int
    only_in_b: int
    mean_a: float | None
    mean_b: float | None
    mean_difference: float | None
    ci95: tuple[float, float] | None
    pairs: int
    """Cases with a verdict on both sides (McNemar's pairs; one per case, see above)."""
    a_only_passed: int
    b_only_passed: int
    mcnemar_p: float
    resamples: int
    seed: int
    per_case: dict[str, float] = field(default_factory=dict)

    @property
    def latency_difference_ms(self) -> float | None:
        """Mean latency of B minus A."""
        if self.a.latency_mean_ms is None or self.b.latency_mean_ms is None:
            return None
        return self.b.latency_mean_ms - self.a.latency_mean_ms

    @property
    def cost_difference_usd(self) -> float | None:
        """Cost of B minus A (None unless both files carry costs)."""
        if self.a.cost_usd is None or self.b.cost_usd is None:
            return None
        return self.b.cost_usd - self.a.cost_usd

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        doc = asdict(self)
        doc["latency_difference_ms"] = self.latency_difference_ms
        doc["cost_difference_usd"] = self.cost_difference_usd
        doc["tokens_difference"] = self.b.tokens - self.a.tokens
        return doc


def _by_case(
    records: Iterable[CaseResult], scorer: str | None
) -> tuple[dict[str, float], dict[str, bool]]:
    """Per case: the mean score over its epochs, and its verdict (passed in more than half of
    its epochs that have one)."""
    scores: defaultdict[str, list[float]] = defaultdict(list)
    verdicts: defaultdict[str, dict[int, bool]] = defaultdict(dict)
    for record in records:
        value = _line_score(record, scorer)
        if value is not None:
            scores[record.id].append(value)
        passed = _line_passed(record, scorer)
        if passed is not None:
            verdicts[record.id][record.epoch] = passed
    majority = {k: 2 * sum(v.values()) > len(v) for k, v in verdicts.items()}
    return {k: math.fsum(v) / len(v) for k, v in scores.items()}, majority


def _scorer_names(records: Iterable[CaseResult]) -> set[str]:
    """Every scorer a line names (that scored it, or that would have)."""
    names: set[str] = set()
    for record in records:
        names.update(record.scores or ())
        names.update(record.scorers or ())
    return names


def compare_results(
    a: str | Path,
    b: str | Path,
    *,
    scorer: str | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Comparison:
    """Compare two results files (see the module docstring).

    Raises:
        InvalidInput: a file is missing or not a results file, the two share no case, no line
            of either has ``scorer``, or no case has a score in both (nothing to compare).
    """
    path_a, path_b = Path(a), Path(b)
    records_a, records_b = read_results(path_a), read_results(path_b)
    if scorer is not None:
        _check_scorer(scorer, (path_a, path_b), (records_a, records_b))
    scores_a, verdicts_a = _by_case(records_a, scorer)
    scores_b, verdicts_b = _by_case(records_b, scorer)
    ids_a = {r.id for r in records_a}
    ids_b = {r.id for r in records_b}
    if not ids_a & ids_b:
        raise InvalidInput(
            f"{path_a} and {path_b} have no case id in common; compare two batches of one "
            "cases file"
        )
    shared = sorted(set(scores_a) & set(scores_b))
    if not shared:
        what = "the line score" if scorer is None else f"scorer {scorer!r}"
        raise InvalidInput(
            f"no case of {path_a} and {path_b} has {what} in both files (ungraded, or scored "
            "on one side only): 0 cases to compare"
        )
    return Comparison(
        a=_side(path_a, records_a),
        b=_side(path_b, records_b),
        scorer=scorer,
        only_in_a=len(ids_a - ids_b),
        only_in_b=len(ids_b - ids_a),
        **_score_changes(scores_a, scores_b, shared, resamples=resamples, seed=seed),
        **_mcnemar(verdicts_a, verdicts_b),
        resamples=resamples,
        seed=seed,
    )


def _score_changes(
    scores_a: dict[str, float],
    scores_b: dict[str, float],
    shared: list[str],
    *,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """How the scores of the cases scored on both sides moved: per case, and on the mean."""
    diffs = {cid: scores_b[cid] - scores_a[cid] for cid in shared}
    improved = [cid for cid, d in diffs.items() if d > EPSILON]
    regressed = [cid for cid, d in diffs.items() if d < -EPSILON]
    values = list(diffs.values())
    return {
        "cases": len(shared),
        "improved": improved,
        "regressed": regressed,
        "unchanged": len(shared) - len(improved) - len(regressed),
        "mean_a": _mean([scores_a[c] for c in shared]),
        "mean_b": _mean([scores_b[c] for c in shared]),
        "mean_difference": _mean(values),
        "ci95": bootstrap_mean_ci(values, resamples=resamples, seed=seed),
        "per_case": diffs,
    }


def _check_scorer(
    scorer: str, paths: tuple[Path, Path], records: tuple[list[CaseResult], list[CaseResult]]
) -> None:
    """Refuse a ``scorer`` no line of either file names (a typo would compare nothing)."""
    present = _scorer_names(records[0]) | _scorer_names(records[1])
    if scorer not in present:
        listed = ", ".join(sorted(present)) or "none (the files hold only line scores)"
        raise InvalidInput(
            f"no line of {paths[0]} or {paths[1]} has scorer {scorer!r}; scorers present: {listed}"
        )


def _mean(xs: list[float]) -> float | None:
    return math.fsum(xs) / len(xs) if xs else None


def _mcnemar(verdicts_a: dict[str, bool], verdicts_b: dict[str, bool]) -> dict[str, Any]:
    """McNemar's exact test on the cases with a verdict on both sides, one pair per case."""
    pairs = sorted(set(verdicts_a) & set(verdicts_b))
    a_only = sum(1 for k in pairs if verdicts_a[k] and not verdicts_b[k])
    b_only = sum(1 for k in pairs if verdicts_b[k] and not verdicts_a[k])
    return {
        "pairs": len(pairs),
        "a_only_passed": a_only,
        "b_only_passed": b_only,
        "mcnemar_p": mcnemar_exact(a_only, b_only),
    }


#: The significance level of ``--fail-if-regressed`` (``--alpha``).
DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class RegressionVerdict:
    """Whether B is significantly worse than A (what ``--fail-if-regressed`` gates on)."""

    regressed: bool
    rule: str
    """``mcnemar`` (pass/fail verdicts on both sides) or ``bootstrap`` (scores only)."""
    alpha: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def significant_regression(c: Comparison, alpha: float = DEFAULT_ALPHA) -> RegressionVerdict:
    """The gate on evidence, not on single cases (a per-case rule fails on noise: two runs of
    one random agent "regress" some cases nearly always).

    With cases that have a pass/fail verdict on both sides: McNemar's exact test on them, one
    pair per case; B regressed when p < ``alpha`` and more cases passed only in A than only in
    B (30 improved and 10 regressed is significant, p = 0.002, and passes). With no such case
    (scores only): the paired bootstrap interval of the mean score difference B - A at
    confidence 1 - ``alpha``; B regressed when the whole interval is below 0.
    """
    if c.pairs:
        worse = c.a_only_passed > c.b_only_passed
        regressed = worse and c.mcnemar_p < alpha
        direction = "A" if worse else "B"
        return RegressionVerdict(
            regressed=regressed,
            rule="mcnemar",
            alpha=alpha,
            reason=(
                f"McNemar exact p = {c.mcnemar_p:.4g} {'<' if c.mcnemar_p < alpha else '>='} "
                f"alpha {alpha:g} over {c.pairs} cases: {c.a_only_passed} passed only in A, "
                f"{c.b_only_passed} only in B (more in {direction})"
            ),
        )
    diffs = list(c.per_case.values())
    interval = bootstrap_mean_ci(diffs, confidence=1 - alpha, resamples=c.resamples, seed=c.seed)
    low, high = interval if interval is not None else (0.0, 0.0)
    return RegressionVerdict(
        regressed=high < 0,
        rule="bootstrap",
        alpha=alpha,
        reason=(
            f"no pass/fail verdicts on both sides: the {1 - alpha:.0%} bootstrap interval of the "
            f"mean score difference B - A is [{low:+.3f}, {high:+.3f}]"
            + (" (below 0)" if high < 0 else "")
        ),
    )


__all__ = [
    "DEFAULT_ALPHA",
    "Comparison",
    "RegressionVerdict",
    "Side",
    "compare_results",
    "significant_regression",
]
