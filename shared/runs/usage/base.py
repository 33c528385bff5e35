"""The tenant-usage seam: count each finished run's usage once into its tenant's UTC day, read
a tenant's day, publish an unfinished run's usage so far (its tenant's in-flight record, which
the step-boundary budget check adds to the day), and admit a submission under its budget.

Members: :class:`~tether.runs.usage.memory.InMemoryTenantUsage` (one process) and
:class:`~tether.runs.usage.redis.RedisTenantUsage` (the fleet); both pass
``tests/test_tenant_usage_contract.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol, runtime_checkable

from tether.core.events import Usage, now_ms
from tether.errors import BudgetExceeded
from tether.settings.budgets import TenantBudget

BudgetName = Literal["tokens_per_day", "usd_per_day", "runs_per_minute"]
#: A day's counters outlive their day by this long (yesterday stays readable).
DAY_TTL_S = 2 * 86_400
#: Cost is counted in nano-USD: integer sums are exact (HINCRBY), and a call of a few tokens of
#: a cheap model still counts.
NANO = 1_000_000_000
#: How many runs' worth of the per-minute rate may arrive at once: one minute's.
BURST_S = 60.0


def utc_day(at_ms: int | None = None) -> str:
    """The UTC day of ``at_ms`` (default now) as ``YYYYMMDD``: the name of a day's counters."""
    ms = now_ms() if at_ms is None else at_ms
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y%m%d")


def day_reset_ms(day: str) -> int:
    """When the day ``day`` (``YYYYMMDD``) ends: the next UTC midnight, in ms."""
    start = datetime.strptime(day, "%Y%m%d").replace(tzinfo=UTC)
    return int((start + timedelta(days=1)).timestamp() * 1000)


@dataclass(frozen=True)
class DayUsage:
    """What one tenant used in one UTC day, over the runs that finished that day."""

    day: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    runs: int = 0
    unpriced_runs: int = 0
    """Runs with tokens whose model has no price (counted as costing 0)."""
    cost_nano_usd: int = 0

    @property
    def tokens(self) -> int:
        """Input + output tokens (what ``tokens_per_day`` limits)."""
        return self.input_tokens + self.output_tokens

    @property
    def cost_usd(self) -> float:
        """The day's cost in USD."""
        return self.cost_nano_usd / NANO

    def plus(self, usage: Usage, cost_usd: float | None) -> DayUsage:
        """This day with one more run's (uncommitted) usage."""
        return DayUsage(
            day=self.day,
            input_tokens=self.input_tokens + usage.input_tokens,
            output_tokens=self.output_tokens + usage.output_tokens,
            cached_tokens=self.cached_tokens + usage.cached_tokens,
            reasoning_tokens=self.reasoning_tokens + usage.reasoning_tokens,
            runs=self.runs + 1,
            unpriced_runs=self.unpriced_runs + (cost_usd is None),
            cost_nano_usd=self.cost_nano_usd + nano_usd(cost_usd),
        )

    def merged(self, other: DayUsage) -> DayUsage:
        """This day with ``other``'s counts added (the day with its runs still in flight)."""
        return DayUsage(
            day=self.day,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            runs=self.runs + other.runs,
            unpriced_runs=self.unpriced_runs + other.unpriced_runs,
            cost_nano_usd=self.cost_nano_usd + other.cost_nano_usd,
        )


def has_tokens(usage: Usage) -> bool:
    """Whether ``usage`` counts any token (only then is a run counted into its tenant's day)."""
    return bool(usage.input_tokens or usage.output_tokens or usage.total_tokens)


def nano_usd(cost_usd: float | None) -> int:
    """``cost_usd`` in whole nano-USD (None, unpriced: 0)."""
    return round((cost_usd or 0.0) * NANO)


@dataclass(frozen=True)
class Verdict:
    """A budget's answer to a submission: admitted, or which budget refused it."""

    admitted: bool
    budget: BudgetName | None = None
    used: float = 0.0
    """The refusing budget's use: tokens or USD today, or runs asked for."""
    retry_after_s: float = 0.0
    """For ``runs_per_minute``: when the runs would be admitted."""


ADMITTED = Verdict(True)


def spent(budget: TenantBudget, day: DayUsage) -> Verdict:
    """Whether ``day`` reached the tokens or USD of ``budget`` (the rate is not looked at)."""
    if budget.tokens_per_day and day.tokens >= budget.tokens_per_day:
        return Verdict(False, "tokens_per_day", float(day.tokens))
    if budget.usd_per_day and day.cost_usd >= budget.usd_per_day:
        return Verdict(False, "usd_per_day", day.cost_usd)
    return ADMITTED


def exceeded(tenant: str, budget: TenantBudget, verdict: Verdict, day: str) -> BudgetExceeded:
    """The error of a refused verdict: the tenant, the budget, its use and when it resets."""
    name = verdict.budget or "budget"
    limit = getattr(budget, name, 0)
    if name == "runs_per_minute":
        used = f"{verdict.used:g} runs asked for"
        resets = f"retry in {verdict.retry_after_s:.1f} s"
    else:
        unit = "tokens" if name == "tokens_per_day" else "USD"
        used = f"{verdict.used:.6g} {unit} used today (UTC {day})"
        reset = datetime.fromtimestamp(day_reset_ms(day) / 1000, tz=UTC)
        resets = f"it resets at {reset:%Y-%m-%dT%H:%M:%SZ}"
    return BudgetExceeded(
        f"tenant {tenant!r} is over its budget {name}={limit:g}: {used}; {resets}, "
        "or raise it in TETHER_TENANT_BUDGETS"
    )


@runtime_checkable
class TenantUsage(Protocol):
    """Per-tenant usage per UTC day, and admission under a tenant's budget."""

    def add(
        self, tenant: str, run_id: str, usage: Usage, cost_usd: float | None, *, at_ms: int
    ) -> bool:
        """Count run ``run_id``'s usage into ``tenant``'s day of ``at_ms``, once: True when
        counted now, False when this run was counted that day before. Either way the run
        leaves that day's in-flight record (:meth:`in_flight`), in the same atomic step."""

    def day(self, tenant: str, *, at_ms: int | None = None) -> DayUsage:
        """What ``tenant`` used in the UTC day of ``at_ms`` (default today)."""

    def in_flight(
        self,
        tenant: str,
        run_id: str | None,
        usage: Usage,
        cost_usd: float | None,
        *,
        at_ms: int | None = None,
    ) -> DayUsage:
        """At a step boundary of run ``run_id``: set what it used so far (``usage``, costing
        ``cost_usd``) in ``tenant``'s in-flight record of the UTC day of ``at_ms`` (default
        today), then return that day plus every unfinished run's usage there, this one's
        included (its ``runs`` counts them too). Set, not added: a boundary seen again or a
        retried attempt is idempotent. Nothing is set when ``run_id`` is None or ``usage`` has
        no tokens. :meth:`add` takes the run out of the record in the same atomic step that
        counts it into the day, so a run is never counted twice nor dropped between the two."""

    def admit(self, tenant: str, budget: TenantBudget, *, runs: int = 1) -> Verdict:
        """Whether ``runs`` submissions of ``tenant`` are within its budget now: refused when
        today's tokens or cost reached it, or the runs exceed its per-minute rate as workers
        took it so far. Reads only (a producer's check: its credential may not write the
        tenant's usage); workers take the rate with :meth:`take_rate` when a run starts."""

    def take_rate(self, tenant: str, budget: TenantBudget, run_id: str) -> Verdict:
        """Take run ``run_id``'s place in ``tenant``'s runs-per-minute rate, as a worker starts
        it: refused (nothing taken; ``retry_after_s`` says when it fits) when over the rate,
        admitted again without taking for a run that took its place before (a retry)."""


def monotonic_us() -> int:
    """The in-memory member's clock for the rate (microseconds)."""
    return int(time.monotonic() * 1_000_000)
