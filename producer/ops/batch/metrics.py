"""Statistics over epochs and scorers: mean, standard error, pass@k, the per-tag breakdown.

Samples (one case, one epoch) are reduced per case first (the mean of its epochs), and the
statistics are over cases, so a case run five times weighs as much as a case run once:

- ``mean``: the mean over cases of each case's mean score, where a sample whose run failed,
  and a scorer that errored, score 0 (the callers pass them so:
  :mod:`tether.producer.ops.batch.line_scores`), so the mean, pass@k and ``compare`` count the
  same cases;
- ``stderr``: the sample standard deviation of those case means over the square root of the
  number of cases (None below two cases);
- ``pass@k``: the unbiased estimator of Chen et al. (2021), ``1 - C(n-c, k) / C(n, k)`` for a
  case passed ``c`` times in ``n`` epochs, averaged over the cases with ``n >= k``.

Memory: a few numbers per graded case (cases without a score cost nothing).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


def pass_at_k(n: int, c: int, k: int) -> float:
    """The probability that at least one of ``k`` of ``n`` samples (``c`` correct) passes.

    Raises:
        ValueError: ``k`` outside 1..n, or ``c`` outside 0..n.
    """
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_stderr(values: list[float]) -> tuple[float | None, float | None]:
    """The mean and the standard error of the mean (sample std / sqrt(n); None below 2)."""
    if not values:
        return None, None
    mean = math.fsum(values) / len(values)
    if len(values) < 2:
        return mean, None
    variance = math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(variance / len(values))


def ks_for(epochs: int) -> list[int]:
    """The k of pass@k reported for ``epochs``: every k up to 5, then powers of two and n."""
    ks = [k for k in range(1, min(epochs, 5) + 1)]
    k = 8
    while k < epochs:
        ks.append(k)
        k *= 2
    if epochs not in ks:
        ks.append(epochs)
    return ks


@dataclass(slots=True)
class _Tally:
    """Samples of one case (or of one case under one scorer)."""

    n: int = 0
    passed: int = 0
    score_sum: float = 0.0
    scored: int = 0

    def add(self, passed: bool | None, score: float | None) -> None:
        if passed is not None:
            self.n += 1
            self.passed += int(passed)
        if score is not None:
            self.scored += 1
            self.score_sum += score


@dataclass(frozen=True)
class ScoreStats:
    """The statistics of one scorer (or of the case verdicts) over cases."""

    cases: int
    samples: int
    passed: int
    mean: float | None
    stderr: float | None
    pass_at_k: dict[int, float]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (pass@k keyed by ``"k"`` as text)."""
        return {
            "cases": self.cases,
            "samples": self.samples,
            "passed": self.passed,
            "mean": self.mean,
            "stderr": self.stderr,
            "pass_at_k": {str(k): v for k, v in self.pass_at_k.items()},
        }


def reduce_tallies(tallies: Iterable[_Tally], epochs: int) -> ScoreStats:
    """Reduce per-case tallies to :class:`ScoreStats` (see the module docstring)."""
    means, cases, samples, passed = [], 0, 0, 0
    by_case: list[_Tally] = []
    for tally in tallies:
        cases += 1
        samples += tally.n
        passed += tally.passed
        by_case.append(tally)
        if tally.scored:
            means.append(tally.score_sum / tally.scored)
    mean, stderr = mean_stderr(means)
    at_k: dict[int, float] = {}
    for k in ks_for(max(epochs, 1)):
        eligible = [pass_at_k(t.n, t.passed, k) for t in by_case if t.n >= k]
        if eligible:
            at_k[k] = math.fsum(eligible) / len(eligible)
    return ScoreStats(cases, samples, passed, mean, stderr, at_k)


class EpochMetrics:
    """Streaming accumulator: per case, per scorer and per tag."""

    def __init__(self) -> None:
        self.cases: defaultdict[str, _Tally] = defaultdict(_Tally)
        self.scorers: defaultdict[str, defaultdict[str, _Tally]] = defaultdict(
            lambda: defaultdict(_Tally)
        )
        self.tags: defaultdict[str, defaultdict[str, _Tally]] = defaultdict(
            lambda: defaultdict(_Tally)
        )
        self.max_epoch = -1

    def add(
        self,
        case_id: str,
        epoch: int,
        *,
        passed: bool | None,
        score: float | None,
        scorer_results: Iterable[tuple[str, bool | None, float | None]] = (),
        tags: Iterable[str] = (),
    ) -> None:
        """Count one sample (a case's epoch) that has a verdict or scores."""
        self.max_epoch = max(self.max_epoch, epoch)
        if passed is None and score is None:
            return
        self.cases[case_id].add(passed, score)
        for name, ok, value in scorer_results:
            self.scorers[name][case_id].add(ok, value)
        for tag in dict.fromkeys(tags):  # a line written before tags were deduplicated
            self.tags[tag][case_id].add(passed, score)

    def overall(self, epochs: int) -> ScoreStats:
        """Statistics of the cases' verdicts and mean scores."""
        return reduce_tallies(self.cases.values(), epochs)

    def by_scorer(self, epochs: int) -> dict[str, ScoreStats]:
        """Statistics of each scorer."""
        return {n: reduce_tallies(t.values(), epochs) for n, t in sorted(self.scorers.items())}

    def by_tag(self, epochs: int) -> dict[str, ScoreStats]:
        """Statistics of the cases of each tag."""
        return {n: reduce_tallies(t.values(), epochs) for n, t in sorted(self.tags.items())}


__all__ = ["EpochMetrics", "ScoreStats", "ks_for", "mean_stderr", "pass_at_k", "reduce_tallies"]
