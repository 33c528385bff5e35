"""Scorers of batch cases: built-in, custom (by import path) and model-graded.

Modules: ``base`` (the :class:`Score` a scorer returns, the :class:`Sample` it is given),
``builtin`` (exact, contains, regex, includes-any, numeric, json, f1), ``judge`` (the
model-graded scorer and its verdict), ``rubric`` (the judge's prompt, the graded answer fenced),
``specs`` (``--scorer`` values to scorers, checked before a batch starts),
``apply`` (running a case's scorers, a raising scorer being that case's scoring error).
"""

from __future__ import annotations

from tether.producer.ops.batch.scoring.apply import score_sample
from tether.producer.ops.batch.scoring.base import Sample, Score, Scorer, ScoreRecord, ScoreUsage
from tether.producer.ops.batch.scoring.specs import BUILTIN_NAMES, resolve_scorers

__all__ = [
    "BUILTIN_NAMES",
    "Sample",
    "Score",
    "ScoreRecord",
    "ScoreUsage",
    "Scorer",
    "resolve_scorers",
    "score_sample",
]
