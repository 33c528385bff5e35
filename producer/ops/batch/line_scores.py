"""What one results line scores in every mean: the summary's, ``compare``'s, the report's and
the Inspect export's, so they agree on the same file.

A line whose run failed scores 0 (and does not pass) for the line and for every scorer that
would have scored it; a scorer that errored scores 0 and does not pass. Leaving either out of a
mean would reward an agent that crashes on the hard cases, and disagree with pass@k, which
counts them as failures. A line no scorer applies to (no ``expected``, no judge or custom
scorer) scores nothing: it is ungraded, not failed.
"""

from __future__ import annotations

import math

from tether.producer.ops.batch.results import CaseResult
from tether.producer.ops.batch.scoring.base import ScoreRecord
from tether.producer.ops.batch.scoring.specs import BUILTIN_NAMES, JUDGE

#: Scorers that score only cases with ``expected`` (the built-ins; the judge scores any case).
_NEED_TARGET = frozenset(BUILTIN_NAMES) - {JUDGE}


def record_value(record: ScoreRecord) -> float:
    """A scorer's value for its line (a scoring error: 0)."""
    return 0.0 if record.value is None or record.error is not None else record.value


def record_passed(record: ScoreRecord) -> bool:
    """Whether a scorer passed its line (a scoring error: no)."""
    return record.error is None and record.passed is True


def _would_have_scored(line: CaseResult, scorer: str) -> bool:
    # a failed line keeps no records, so whether the scorer applied is read off the line:
    # it was graded, the scorer was one of its scorers, and it had what the scorer needs
    if line.passed is None:
        return False
    if line.scorers is not None and scorer not in line.scorers:
        return False
    return line.expected is not None or scorer.partition(":")[0] not in _NEED_TARGET


def line_score(line: CaseResult) -> float | None:
    """The line's score: the mean of its scorers' values (errors 0), 0 when its run failed,
    its verdict (1 or 0) for a line without scores; None when ungraded."""
    if line.scores:
        return math.fsum(record_value(r) for r in line.scores.values()) / len(line.scores)
    if line.score is not None:
        return line.score
    if line.passed is not None:
        return float(line.passed)
    return None


def scorer_value(line: CaseResult, scorer: str) -> float | None:
    """One scorer's value for the line (see the module docstring); None: it did not apply."""
    record = (line.scores or {}).get(scorer)
    if record is not None:
        return record_value(record)
    return 0.0 if line.errored and _would_have_scored(line, scorer) else None


def scorer_passed(line: CaseResult, scorer: str) -> bool | None:
    """Whether one scorer passed the line; None: it did not apply."""
    record = (line.scores or {}).get(scorer)
    if record is not None:
        return record_passed(record)
    return False if line.errored and _would_have_scored(line, scorer) else None


def scorer_outcomes(line: CaseResult) -> list[tuple[str, bool | None, float | None]]:
    """``(scorer, passed, value)`` of every scorer that scored the line or would have."""
    names = list(line.scores or {})
    if line.errored:
        names += [n for n in line.scorers or () if n not in names]
    outcomes = [(n, scorer_passed(line, n), scorer_value(line, n)) for n in names]
    return [o for o in outcomes if o[1] is not None or o[2] is not None]


__all__ = [
    "line_score",
    "record_passed",
    "record_value",
    "scorer_outcomes",
    "scorer_passed",
    "scorer_value",
]
