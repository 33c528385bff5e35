"""A finished case (one epoch) to its results line: its runs' outcome, then its scores.

Which scorers score a case: the batch's (``--scorer``), plus the case's own ``grader`` when the
case names one or when the batch has none (the default ``exact``, as before scorers existed).
Built-in scorers need the case's ``expected`` value; custom scorers and the judge do not. A
case whose run failed is not scored (``passed`` is False when a scorer would have applied; every
mean counts it 0: :mod:`tether.producer.ops.batch.line_scores`).

With ``TETHER_REDACT_INPUTS`` (the default) the line is masked before it is written: the case's
input (every turn), ``expected``, tags and metadata, and what the scorers wrote (explanations,
metadata, errors) and the run's error, with the credential patterns a run's input is masked
with (:func:`mask_line`). The results file is what reports, exports, ``compare``, ``retry`` and
the console read, so a secret pasted into a case reaches none of them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.core.events import Usage
from tether.core.results import RunStatus
from tether.producer.ops.batch.cases import NumberedCase
from tether.producer.ops.batch.grading import grader_scorer
from tether.producer.ops.batch.line_scores import record_passed, record_value
from tether.producer.ops.batch.results import CaseResult, RunUsage, error_kind
from tether.producer.ops.batch.scoring.apply import applies, score_sample
from tether.producer.ops.batch.scoring.base import LazyEvents, Sample, Scorer, ScoreRecord
from tether.runtime.redaction import DEFAULT_REDACTOR, mask_input, redact_tree

if TYPE_CHECKING:
    from tether.core.events import AgentEvent
    from tether.runs.contract import RunResult

#: Reads the events of a case's runs: ``(session_id, run_ids) -> events``.
EventsLoader = Callable[[str, list[str]], "list[AgentEvent]"]


@dataclass
class CaseOutcome:
    """What a case's runs produced, turn by turn."""

    numbered: NumberedCase
    session_id: str
    agent: str
    started: float
    epoch: int = 0
    attempt: int = 0
    turn: int = 0
    outputs: list[str | None] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    """At the workers' ``TETHER_MODEL_PRICES`` (None: no turn was priced)."""


def case_scorers(outcome: CaseOutcome, scorers: list[Scorer]) -> tuple[list[Scorer], bool]:
    """The scorers of this case, and whether its own grader is one of them."""
    case = outcome.numbered.case
    own = case.expected is not None and (not scorers or "grader" in case.model_fields_set)
    if not own:
        return scorers, False
    mine = grader_scorer(case.grader)
    if any(s.name == mine.name for s in scorers):
        return scorers, False
    return [*scorers, mine], True


def _verdict(records: list[ScoreRecord]) -> tuple[bool | None, float | None]:
    """The case's ``passed`` (every scorer passed) and ``score`` (the mean of the values, a
    scoring error counting 0, as every mean over the results file counts it)."""
    if not records:
        return None, None
    score = math.fsum(record_value(r) for r in records) / len(records)
    return all(record_passed(r) for r in records), score


def build_record(
    outcome: CaseOutcome,
    result: RunResult | None,
    error: tuple[str, str] | None,
    *,
    batch_id: str,
    scorers: list[Scorer],
    events: EventsLoader | None,
    redact: bool,
    tenant: str | None = None,
) -> CaseResult:
    """The results line of a finished case: run outcome, scores, verdict; masked by
    :func:`mask_line` when ``redact`` (the producer's ``redact_inputs``). ``tenant``, the
    tenant the case ran in, is written in the line: the console checks it before serving a
    report."""
    # scored first: the line's latency (taken in _run_fields) has always included the scoring
    scored = _score_fields(outcome, result, scorers, events)
    line = CaseResult(
        batch_id=batch_id,
        tenant=tenant,
        **_case_fields(outcome),
        **_run_fields(outcome, result),
        **_error_fields(outcome, error),
        **scored,
    )
    return mask_line(line) if redact else line


def _case_fields(outcome: CaseOutcome) -> dict[str, Any]:
    """What the line repeats of the case as written (masked later, with the rest)."""
    case = outcome.numbered.case
    return {
        "id": case.id,
        "line": outcome.numbered.line,
        "metadata": case.metadata or None,
        "epoch": outcome.epoch,
        "attempt": outcome.attempt,
        "tags": case.tags or None,
        "input": case.input,
        "expected": case.expected,
    }


def _run_fields(outcome: CaseOutcome, result: RunResult | None) -> dict[str, Any]:
    """What the case's runs did: status and output of the last, the totals of all."""
    usage = outcome.usage
    return {
        "session_id": outcome.session_id,
        "agent": outcome.agent,
        "status": result.status.value if result is not None else RunStatus.FAILED.value,
        "output": result.output if result is not None else None,
        "outputs": outcome.outputs if len(outcome.numbered.case.turns) > 1 else None,
        "latency_ms": int((time.monotonic() - outcome.started) * 1000),
        "steps": outcome.steps,
        "tokens": usage.total_tokens,
        "cost_usd": outcome.cost_usd,
        "turns": len(outcome.outputs),
        "run_ids": outcome.run_ids,
        "usage": RunUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.total_tokens,
        ),
    }


def _error_fields(outcome: CaseOutcome, error: tuple[str, str] | None) -> dict[str, Any]:
    """The error that ended the case (``(type, message)``), naming its turn when it had several."""
    if error is None:
        return {"error_type": None, "error": None, "error_kind": None}
    error_type, message = error
    turns = len(outcome.numbered.case.turns)
    if turns > 1:
        message = f"turn {outcome.turn} of {turns}: {message}"
    return {"error_type": error_type, "error": message, "error_kind": error_kind(error_type)}


def _score_fields(
    outcome: CaseOutcome,
    result: RunResult | None,
    scorers: list[Scorer],
    events: EventsLoader | None,
) -> dict[str, Any]:
    """The case's scores and verdict; a case whose run failed is not scored, and did not pass
    when a scorer would have applied."""
    case = outcome.numbered.case
    mine, own_grader = case_scorers(outcome, scorers)
    records: list[ScoreRecord] = []
    passed: bool | None
    score: float | None = None
    if result is not None and result.ok:
        # scorers get the case as written, unmasked: the agent saw the masked input, but the
        # reference is the author's, and scoring against a masked ``expected`` could pass an
        # output that merely echoes the mask. Only the stored line is masked, after scoring.
        sample = Sample(case=case, output=result.output, epoch=outcome.epoch)
        if events is not None:
            load = events
            sample.events = LazyEvents(lambda: load(outcome.session_id, list(outcome.run_ids)))
        records = score_sample(mine, sample)
        passed, score = _verdict(records)
    else:
        probe = Sample(case=case, output=None)
        passed = False if any(applies(s, probe) for s in mine) else None
    return {
        "passed": passed,
        "grader": case.grader.value if own_grader else None,
        "scores": {r.scorer: r for r in records} or None,
        "score": score,
        "scorers": [s.name for s in mine] or None,
    }


def _masked_tree(value: Any) -> Any:
    # every string of a JSON tree (keys too), as run metadata is masked at submission
    return redact_tree(value, DEFAULT_REDACTOR)


def _masked_score(record: ScoreRecord) -> ScoreRecord:
    # a scorer may quote what it compared: the exact scorer's "output is not '<expected>'"
    return record.model_copy(
        update={
            "explanation": mask_input(record.explanation),
            "metadata": _masked_tree(record.metadata),
            "error": mask_input(record.error),
        }
    )


def mask_line(line: CaseResult) -> CaseResult:
    """``line`` with the credential patterns masked in every text that came from the case
    (input turns, ``expected``, tags, metadata) or may quote it (scores, the error).

    Outputs are left as the run stored them: the agent saw only the masked input, and what
    it answers is its own ``redact=`` business, as in the run record.
    """
    scores = line.scores
    return line.model_copy(
        update={
            # a text, or a list of turns: each turn masked as the producer masked it when sent
            "input": _masked_tree(line.input),
            "expected": _masked_tree(line.expected),
            "tags": _masked_tree(line.tags),
            "metadata": _masked_tree(line.metadata),
            "error": mask_input(line.error),
            "scores": None if scores is None else {n: _masked_score(r) for n, r in scores.items()},
        }
    )


__all__ = ["CaseOutcome", "EventsLoader", "build_record", "case_scorers", "mask_line"]
