"""The drain's check before a run starts (:mod:`tether.worker.engine.turns`): a run of a tenant
that is behind another at a shared model limit, with a call of its own already waiting, goes back
to its queue; the same session back within a second starts (no spinning on a short queue)."""

from __future__ import annotations

from tether.runs.limits.memory import InMemoryModelBudget
from tether.settings.limits import ModelLimits
from tether.worker.engine.turns import DEFER_AGAIN_AFTER_S, ModelTurns

LIMITS = ModelLimits.parse('{"m": {"concurrent_requests": 1, "idle_credit_s": 0}}')


def test_a_run_behind_another_tenant_leaves_its_worker_once_a_second() -> None:
    now = [100.0]
    budget = InMemoryModelBudget(wait_grace_s=3600, clock=lambda: now[0])
    limit = LIMITS.root["m"]
    turns = ModelTurns(budget, LIMITS, clock=lambda: now[0])
    assert budget.admit("m", limit, "a-0", 0, tenant="team-a").admitted
    assert not budget.admit("m", limit, "a-1", 0, tenant="team-a").admitted  # A waits
    assert not turns.leave("team-a", "s-1", "m")  # nobody else waits: A keeps every worker
    assert not budget.admit("m", limit, "b-1", 0, tenant="team-b").admitted  # B is owed
    assert turns.leave("team-a", "s-1", "m")
    assert not turns.leave("team-a", "s-1", "m")  # back at once: it starts
    assert turns.leave("team-a", "s-2", "m")  # another session of A is put back
    assert not turns.leave("team-b", "s-9", "m")  # the owed tenant never is
    assert not turns.leave("team-a", "s-3", "unlimited")  # nor a run of a model without limits
    now[0] += DEFER_AGAIN_AFTER_S
    assert turns.leave("team-a", "s-1", "m")  # a second later it may be put back again
