"""Run a case's scorers: each gives a :class:`ScoreRecord`, a scorer that raises gives an error.

A scorer's exception never ends the batch: the case keeps a scoring error (the exception's last
line, as Python prints it) for that scorer, and the others still run.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence

import pydantic

from tether.producer.ops.batch.scoring.base import Sample, Score, Scorer, ScoreRecord

MAX_ERROR_CHARS = 1000


def error_line(exc: BaseException) -> str:
    """The last line Python prints for ``exc`` (``ValueError: bad thing``), shortened."""
    line = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return line[:MAX_ERROR_CHARS]


def applies(scorer: Scorer, sample: Sample) -> bool:
    """Whether ``scorer`` scores this case (built-ins need an ``expected`` value)."""
    return sample.case.expected is not None or not scorer.needs_target


def score_one(scorer: Scorer, sample: Sample) -> ScoreRecord:
    """One scorer's record for ``sample``; an exception becomes the record's ``error``."""
    try:
        score = scorer.fn(sample)
        if not isinstance(score, Score):
            raise TypeError(f"scorer returned {type(score).__name__}, not a Score")
    except Exception as exc:  # a scorer is user code: whatever it raises is its case's error
        if isinstance(exc, pydantic.ValidationError):  # e.g. Score(value=1.5)
            message = f"ValueError: the scorer's Score is invalid: {exc.errors()[0]['msg']}"
        else:
            message = error_line(exc)
        return ScoreRecord(scorer=scorer.name, error=message, usage=getattr(exc, "usage", None))
    passed = score.passed if score.passed is not None else score.value >= scorer.threshold
    return ScoreRecord(
        scorer=scorer.name,
        value=score.value,
        passed=passed,
        explanation=score.explanation,
        metadata=score.metadata or None,
        usage=score.usage,
    )


def score_sample(scorers: Sequence[Scorer], sample: Sample) -> list[ScoreRecord]:
    """The records of every scorer that applies to ``sample``, in the scorers' order."""
    return [score_one(s, sample) for s in scorers if applies(s, sample)]


__all__ = ["applies", "error_line", "score_one", "score_sample"]
