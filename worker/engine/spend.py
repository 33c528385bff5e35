"""What a run spends: its cost at ``TETHER_MODEL_PRICES``, its tenant's budget checked at each
step boundary (``TETHER_TENANT_BUDGETS``), and the token and cost metrics once it committed.

A run's model calls all go to its agent's model, so a run is priced at that model. At each step
boundary the run sets what it used so far in its tenant's in-flight record of the day (one
field per run, set, not added, so a boundary seen again or a retried attempt is idempotent),
and the tenant's day (the runs that finished today, :mod:`tether.runs.usage`) plus every
unfinished run's usage there (this one's included) is held against the budget, in one round
trip (:meth:`~tether.runs.usage.base.TenantUsage.in_flight`). Concurrent runs of a tenant so
see each other's spending, and a day goes over its budget by at most one step of each running
run. Over it, the run stops there with :class:`~tether.errors.BudgetExceeded`, keeping its
finished steps (they commit as usual). The run's finish moves it from the in-flight record into
the day in one atomic step (``usage_add.lua``). Tenants without a tokens or USD budget cost no
Redis command here.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.core.events import EventType, Usage
from tether.models.prices import usage_by_model
from tether.observability import metrics
from tether.runs.contract import RunResult
from tether.runs.usage.base import TenantUsage, exceeded, has_tokens, spent
from tether.runs.usage.policy import budget_of, prices
from tether.runtime.session import AgentSession
from tether.settings import Settings
from tether.settings.budgets import TenantBudget
from tether.settings.prices import ModelPrices


def priced(result: RunResult, model: str, table: ModelPrices) -> RunResult:
    """``result`` with the cost of its usage at ``model``'s price (unchanged when unpriced)."""
    if not has_tokens(result.usage):
        return result
    cost = table.cost_usd(model, result.usage)
    return result if cost is None else result.model_copy(update={"cost_usd": cost})


def committed(result: RunResult, model: str) -> None:
    """Count a committed run's tokens and cost (once: called after its commit, by the worker
    that committed it or the one that finished it after a crash between commit and finish)."""
    if has_tokens(result.usage):
        metrics.model_usage(model, result.tenant, result.usage, result.cost_usd)


@dataclass
class SpendCheck:
    """The step-boundary check of one run against its tenant's tokens and USD per day."""

    usage: TenantUsage
    tenant: str
    budget: TenantBudget
    model: str
    table: ModelPrices
    session: AgentSession
    first_seq: int
    run_id: str | None = None
    """The run's id, read off its first event (the worker's call site does not pass it)."""

    def __call__(self) -> None:
        """Publish this run's usage so far into its tenant's in-flight record, and raise
        :class:`~tether.errors.BudgetExceeded` when the tenant's day with every unfinished
        run's usage (this one's included) reached its budget."""
        run = self.run_usage()
        if self.run_id is None:
            self.run_id = run_id_of(self.session, self.first_seq)
        cost = self.table.cost_usd(self.model, run)
        day = self.usage.in_flight(self.tenant, self.run_id, run, cost)
        verdict = spent(self.budget, day)
        if not verdict.admitted:
            raise exceeded(self.tenant, self.budget, verdict, day.day)

    def run_usage(self) -> Usage:
        """What this run's model calls used so far."""
        return run_usage(self.session, self.first_seq)


def run_usage(session: AgentSession, first_seq: int) -> Usage:
    """What the model calls of the run that began at ``first_seq`` used (its events: they stay
    in the log when a failed run's memory is rolled back)."""
    events = (e for e in session.events if e.seq >= first_seq)
    return sum(usage_by_model(events).values(), Usage())


def run_id_of(session: AgentSession, first_seq: int) -> str | None:
    """The id of the run that began at ``first_seq`` (None: it wrote no event yet)."""
    return next((e.run_id for e in session.events if e.seq >= first_seq and e.run_id), None)


def spend_check(
    settings: Settings,
    usage: TenantUsage,
    tenant: str,
    model: str,
    session: AgentSession,
    first_seq: int,
) -> SpendCheck | None:
    """The check of a run of ``tenant`` (None: the tenant has no tokens or USD budget)."""
    budget = budget_of(settings, tenant)
    if budget is None or not budget.spend_limited:
        return None
    return SpendCheck(usage, tenant, budget, model, prices(settings), session, first_seq)


def run_steps(session: AgentSession, first_seq: int) -> int:
    """How many steps the run that began at ``first_seq`` finished (its ``STEP_END`` events)."""
    return sum(1 for e in session.events if e.seq >= first_seq and e.type is EventType.STEP_END)
