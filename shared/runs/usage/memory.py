"""Tenant usage in one process: the same rules as the Redis scripts, on a monotonic clock."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tether.core.events import Usage
from tether.runs.usage.base import (
    ADMITTED,
    BURST_S,
    DayUsage,
    Verdict,
    has_tokens,
    monotonic_us,
    spent,
    utc_day,
)
from tether.settings.budgets import TenantBudget


class InMemoryTenantUsage:
    """:class:`~tether.runs.usage.base.TenantUsage` for one process (tests, in-process runs).

    Args:
        clock_us: the rate's clock in microseconds (injectable for tests).
    """

    def __init__(self, *, clock_us: Callable[[], int] = monotonic_us) -> None:
        self._clock_us = clock_us
        self._days: dict[tuple[str, str], DayUsage] = {}
        self._counted: set[tuple[str, str, str]] = set()
        self._in_flight: dict[tuple[str, str], dict[str, DayUsage]] = {}
        self._tat_us: dict[str, int] = {}
        self._rated: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def add(
        self, tenant: str, run_id: str, usage: Usage, cost_usd: float | None, *, at_ms: int
    ) -> bool:
        day = utc_day(at_ms)
        with self._lock:
            self._in_flight.get((tenant, day), {}).pop(run_id, None)
            if (tenant, day, run_id) in self._counted:
                return False
            self._counted.add((tenant, day, run_id))
            before = self._days.get((tenant, day), DayUsage(day))
            self._days[tenant, day] = before.plus(usage, cost_usd)
        return True

    def day(self, tenant: str, *, at_ms: int | None = None) -> DayUsage:
        day = utc_day(at_ms)
        with self._lock:
            return self._days.get((tenant, day), DayUsage(day))

    def in_flight(
        self,
        tenant: str,
        run_id: str | None,
        usage: Usage,
        cost_usd: float | None,
        *,
        at_ms: int | None = None,
    ) -> DayUsage:
        day = utc_day(at_ms)
        with self._lock:
            if run_id is not None and has_tokens(usage):
                running = self._in_flight.setdefault((tenant, day), {})
                running[run_id] = DayUsage(day).plus(usage, cost_usd)  # set, not added
            total = self._days.get((tenant, day), DayUsage(day))
            for run in self._in_flight.get((tenant, day), {}).values():
                total = total.merged(run)
            return total

    def admit(self, tenant: str, budget: TenantBudget, *, runs: int = 1) -> Verdict:
        # the day with the unfinished runs' usage so far, as a step boundary checks it
        today = self.in_flight(tenant, None, Usage(), None)
        verdict = spent(budget, today) if budget.spend_limited else ADMITTED
        if not verdict.admitted or not budget.runs_per_minute:
            return verdict
        with self._lock:
            over_us = self._over_us(tenant, budget.us_per_run * runs)
        if over_us > 0:
            return Verdict(False, "runs_per_minute", float(runs), over_us / 1e6)
        return ADMITTED

    def take_rate(self, tenant: str, budget: TenantBudget, run_id: str) -> Verdict:
        if not budget.runs_per_minute:
            return ADMITTED
        with self._lock:
            if (tenant, run_id) in self._rated:
                return ADMITTED
            over_us = self._over_us(tenant, budget.us_per_run)
            if over_us > 0:
                return Verdict(False, "runs_per_minute", 1.0, over_us / 1e6)
            self._tat_us[tenant] = max(self._tat_us.get(tenant, 0), self._clock_us())
            self._tat_us[tenant] += budget.us_per_run
            self._rated.add((tenant, run_id))
        return ADMITTED

    def _over_us(self, tenant: str, cost_us: int) -> int:
        """How far past the rate's tolerance taking ``cost_us`` more would go (> 0: refused)."""
        now = self._clock_us()
        tat = max(self._tat_us.get(tenant, 0), now)
        return tat + cost_us - now - int(BURST_S * 1_000_000)
