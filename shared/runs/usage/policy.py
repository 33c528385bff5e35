"""The price table and the tenant budgets of this process (parsed once from the settings), and
the budget check of a submission (the producers' own: :func:`budgeted` with
:class:`~tether.runs.usage.redis.RedisTenantAdmission` or its asyncio twin)."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence

from tether.runs.contract import RunRequest
from tether.runs.usage.base import TenantUsage, exceeded, utc_day
from tether.settings import Settings
from tether.settings.budgets import TenantBudget, TenantBudgets
from tether.settings.prices import ModelPrices


@functools.lru_cache(maxsize=4)
def _prices(text: str) -> ModelPrices:
    return ModelPrices.parse(text)


@functools.lru_cache(maxsize=4)
def _budgets(text: str) -> TenantBudgets:
    return TenantBudgets.parse(text)


def prices(settings: Settings) -> ModelPrices:
    """``TETHER_MODEL_PRICES``, parsed once per process (validated with the settings)."""
    return _prices(settings.model_prices)


def budget_of(settings: Settings, tenant: str) -> TenantBudget | None:
    """``tenant``'s budget from ``TETHER_TENANT_BUDGETS`` (None: unlimited)."""
    return _budgets(settings.tenant_budgets).for_tenant(tenant)


def max_wait_of(settings: Settings, tenant: str) -> float:
    """``tenant``'s ``max_wait_s`` from ``TETHER_TENANT_BUDGETS`` (0: none of its own)."""
    return _budgets(settings.tenant_budgets).max_wait_s(tenant)


def policy_of(settings: Settings, tenant: str) -> TenantBudget | None:
    """``tenant``'s entry of ``TETHER_TENANT_BUDGETS``, limited or not (its run limits)."""
    return _budgets(settings.tenant_budgets).entry(tenant)


def budgeted(
    settings: Settings, requests: Sequence[RunRequest]
) -> list[tuple[str, TenantBudget, int]]:
    """The tenants among ``requests`` that have a budget, each with it and its run count."""
    counts = Counter(r.tenant for r in requests)
    found = [(tenant, budget_of(settings, tenant), runs) for tenant, runs in counts.items()]
    return [(tenant, budget, runs) for tenant, budget, runs in found if budget is not None]


def admit_submission(
    usage: TenantUsage, settings: Settings, requests: Sequence[RunRequest]
) -> None:
    """Refuse ``requests`` when a tenant among them is over its budget: its tokens or USD
    today, or its runs per minute (one round trip per budgeted tenant; none without budgets).

    Raises:
        BudgetExceeded: naming the tenant, the budget, the use and when it resets.
    """
    for tenant, budget, runs in budgeted(settings, requests):
        verdict = usage.admit(tenant, budget, runs=runs)
        if not verdict.admitted:
            raise exceeded(tenant, budget, verdict, utc_day())
