"""The scorer seam: what a scorer is given (:class:`Sample`), what it returns (:class:`Score`).

A scorer is any callable ``scorer(case, output, events) -> Score`` (a float in [0, 1] or a bool
is accepted too and becomes a score without explanation). ``events`` is the run's events in
sequence order, read from the session's log only when the scorer first touches it, so scorers
that look at the output alone cost no storage read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, overload, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

if TYPE_CHECKING:
    from tether.core.events import AgentEvent
    from tether.producer.ops.batch.cases import BatchCase

#: Longest explanation kept in a results line (a judge can write a lot).
MAX_EXPLANATION_CHARS = 4000


def _unset(value: object) -> bool:
    return value is None


class ScoreUsage(BaseModel):
    """Tokens a scorer spent (a judge's model calls), and what they cost at the producer's
    ``TETHER_MODEL_PRICES`` (``cost_usd``; None: the judge's model is unpriced)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    # left out when unpriced, so lines of unpriced judges stay as they were written
    cost_usd: float | None = Field(default=None, exclude_if=_unset)


class Score(BaseModel):
    """What one scorer said about one case: a value in [0, 1], why, and anything else.

    Attributes:
        value: 1.0 is fully right, 0.0 fully wrong.
        explanation: a short human-readable reason (a judge's reasoning, a diff...).
        metadata: any JSON the scorer wants kept with the result.
        passed: whether this counts as a pass (None: ``value >= threshold`` of the scorer, 1.0
            unless its spec says otherwise).
        usage: tokens the scorer spent on model calls (a judge), recorded per case.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: float = Field(ge=0.0, le=1.0)
    explanation: str | None = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    passed: bool | None = None
    usage: ScoreUsage | None = None

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float) -> float:
        if math.isnan(value):
            raise ValueError("a score value must be a number in [0, 1], got NaN")
        return value

    @field_validator("explanation")
    @classmethod
    def _short(cls, value: str | None) -> str | None:
        if value is not None and len(value) > MAX_EXPLANATION_CHARS:
            return value[: MAX_EXPLANATION_CHARS - 1] + "…"
        return value


class ScoreRecord(BaseModel):
    """One scorer's entry in a results line: the score, or the scoring error instead.

    ``value`` and ``passed`` are None when the scorer failed (``error`` says why): a scoring
    error is neither a pass nor a fail of the agent.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    # unset parts are left out of results lines (a score has no error, an error no value)
    scorer: str
    value: float | None = Field(default=None, exclude_if=_unset)
    passed: bool | None = Field(default=None, exclude_if=_unset)
    explanation: str | None = Field(default=None, exclude_if=_unset)
    metadata: dict[str, JsonValue] | None = Field(default=None, exclude_if=_unset)
    error: str | None = Field(default=None, exclude_if=_unset)
    usage: ScoreUsage | None = Field(default=None, exclude_if=_unset)


@runtime_checkable
class ScorerFn(Protocol):
    """A custom scorer: ``grade(case, output, events)``."""

    def __call__(
        self, case: BatchCase, output: str | None, events: Sequence[AgentEvent], /
    ) -> Score | float | bool: ...


class LazyEvents(Sequence["AgentEvent"]):
    """The events of a case's runs, loaded on first use (one read of the session's log)."""

    def __init__(self, load: Callable[[], list[AgentEvent]]) -> None:
        self._load = load
        self._events: list[AgentEvent] | None = None

    def _all(self) -> list[AgentEvent]:
        if self._events is None:
            self._events = self._load()
        return self._events

    @overload
    def __getitem__(self, index: int) -> AgentEvent: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[AgentEvent]: ...

    def __getitem__(self, index: int | slice) -> AgentEvent | Sequence[AgentEvent]:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[AgentEvent]:
        return iter(self._all())


@dataclass
class Sample:
    """What the scorers of one finished case see."""

    case: BatchCase
    output: str | None
    events: Sequence[AgentEvent] = field(default_factory=list)
    epoch: int = 0


@dataclass(frozen=True)
class Scorer:
    """A configured scorer: its name in results, the function, and its pass threshold.

    Attributes:
        name: the key of its scores in results lines (the ``--scorer`` value).
        fn: ``fn(sample) -> Score``; raising is a scoring error for that case.
        threshold: a score passes at or above it (unless the score sets ``passed``).
        needs_target: the case must have ``expected`` (cases without one are not scored).
        slow: it may block (a model call, custom code): the batch runs it on scoring threads,
            so several cases are scored at once (it must be thread-safe).
    """

    name: str
    fn: Callable[[Sample], Score]
    threshold: float = 1.0
    needs_target: bool = True
    slow: bool = False


__all__ = [
    "MAX_EXPLANATION_CHARS",
    "LazyEvents",
    "Sample",
    "Score",
    "ScoreRecord",
    "ScoreUsage",
    "Scorer",
    "ScorerFn",
]
