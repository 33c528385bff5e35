"""Custom scorers for the batch scorer tests, imported by path (``--scorer
tests.support.eval_scorers:NAME``), as a user's own module would be."""

from __future__ import annotations

from collections.abc import Sequence

from tether.core.events import AgentEvent
from tether.producer.ops.batch import BatchCase, Score


def length_ratio(case: BatchCase, output: str | None, events: Sequence[AgentEvent]) -> Score:
    """len(expected) / len(output), capped at 1: hand-computable."""
    expected = str(case.expected or "")
    got = output or ""
    value = min(1.0, len(expected) / len(got)) if got else 0.0
    return Score(
        value=value, explanation=f"{len(expected)}/{len(got)}", metadata={"output_chars": len(got)}
    )


def event_count(case: BatchCase, output: str | None, events: Sequence[AgentEvent]) -> Score:
    """1.0, with the types of the run's events in the metadata (they are read from the log)."""
    return Score(value=1.0, metadata={"types": [str(e.type.value) for e in events]})


def explode(case: BatchCase, output: str | None, events: Sequence[AgentEvent]) -> Score:
    """Always raises: a scoring error, never a crash."""
    raise ZeroDivisionError(f"cannot score {case.id}\nsecond line of the message")


def as_bool(case: BatchCase, output: str | None, events: Sequence[AgentEvent]) -> bool:
    """A bare bool is a score too."""
    return output is not None and "yes" in output


def out_of_range(case: BatchCase, output: str | None, events: Sequence[AgentEvent]) -> float:
    """1.5 is not a score: a scoring error."""
    return 1.5


NOT_CALLABLE = 42
