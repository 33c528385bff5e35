"""A case's own grader (its ``grader`` field) as a scorer, and the boolean :func:`grade`.

``exact`` compares the strings as they are (no trimming or case folding, so a grader never
passes an answer its author did not write down); ``contains`` looks for ``expected`` inside the
output; ``regex`` succeeds when ``re.search(expected, output)`` finds a match (anchor the
pattern with ``^...$`` for a full match); the others are the built-in scorers of the same name
(:mod:`tether.producer.ops.batch.scoring.builtin`). A run that produced no output never passes.
"""

from __future__ import annotations

from functools import cache

from tether.producer.ops.batch.cases import BatchCase, Grader
from tether.producer.ops.batch.scoring.base import Sample, Scorer
from tether.producer.ops.batch.scoring.specs import builtin_scorer


@cache
def grader_scorer(grader: Grader) -> Scorer:
    """The built-in scorer a case's ``grader`` names (default options)."""
    return builtin_scorer(grader.value)


def grade(grader: Grader, expected: str, output: str | None) -> bool:
    """True when ``output`` satisfies ``expected`` under ``grader``."""
    case = BatchCase(id="-", input="-", expected=expected, grader=grader)
    score = grader_scorer(grader).fn(Sample(case=case, output=output))
    return score.value >= 1.0


__all__ = ["grade", "grader_scorer"]
