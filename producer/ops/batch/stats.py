"""Paired statistics for comparing two batches: a bootstrap interval and McNemar's exact test.

Both are written out here (a few lines each, exact integer arithmetic for McNemar) rather than
taken from scipy, which would be a large runtime dependency for two formulas; the tests check
them against scipy.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

#: Resamples of the paired bootstrap.
DEFAULT_RESAMPLES = 10_000


def bootstrap_mean_ci(
    differences: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float] | None:
    """The percentile bootstrap interval of the mean of paired differences (None if empty).

    Cases are resampled with replacement (``random.Random(seed)``, so the interval is the same
    on every run); the interval holds the middle ``confidence`` of the resampled means.
    """
    n = len(differences)
    if n == 0:
        return None
    rng = random.Random(seed)
    values = list(differences)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    alpha = (1.0 - confidence) / 2
    return _quantile(means, alpha), _quantile(means, 1.0 - alpha)


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided p-value of McNemar's exact test on the discordant pairs.

    ``b``: pairs that passed in A and failed in B; ``c``: the reverse. Under the null
    hypothesis each discordant pair goes either way with probability 1/2, so the p-value is
    ``min(1, 2 * P[X <= min(b, c)])`` for ``X ~ Binomial(b + c, 1/2)`` (1.0 with no discordant
    pair).
    """
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return min(1.0, 2.0 * tail / (1 << n))


__all__ = ["DEFAULT_RESAMPLES", "bootstrap_mean_ci", "mcnemar_exact"]
