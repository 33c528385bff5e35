"""Graders: does a case's final output match its ``expected`` value?

``exact`` compares the strings as they are (no trimming or case folding, so a grader never
passes an answer its author did not write down); ``contains`` looks for ``expected`` inside the
output; ``regex`` succeeds when ``re.search(expected, output)`` finds a match (anchor the
pattern with ``^...$`` for a full match). A run that produced no output never passes.
"""

from __future__ import annotations

import re
from functools import lru_cache

from tether.producer.ops.batch.cases import Grader


@lru_cache(maxsize=256)
def _pattern(expected: str) -> re.Pattern[str]:
    return re.compile(expected)


def grade(grader: Grader, expected: str, output: str | None) -> bool:
    """True when ``output`` satisfies ``expected`` under ``grader``."""
    if output is None:
        return False
    if grader is Grader.EXACT:
        return output == expected
    if grader is Grader.CONTAINS:
        return expected in output
    return _pattern(expected).search(output) is not None


__all__ = ["grade"]
