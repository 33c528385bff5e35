"""A run behind another tenant at a shared model limit leaves its worker: before it starts
(:mod:`tether.worker.engine.turns`: its tenant is behind and has a call of its own waiting; the
same session back within a second starts, no spinning on a short queue), or after waiting a
second for other tenants' turns when it has done nothing yet
(:class:`~tether.worker.engine.waits.WaitNotice`)."""

from __future__ import annotations

import pytest

from tether.errors import RunYielded
from tether.runs.contract import RunRef
from tether.runs.leases.memory import InMemoryLeaseManager
from tether.runs.limits.memory import InMemoryModelBudget
from tether.runs.queue.memory import InMemoryRunQueue
from tether.settings.limits import ModelLimits
from tether.worker.engine.turns import DEFER_AGAIN_AFTER_S, ModelTurns
from tether.worker.engine.waits import YIELD_AFTER_S, WaitNotice

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


def test_a_run_that_did_nothing_yet_leaves_its_worker_after_a_second_of_others_turns() -> None:
    runs = InMemoryRunQueue(InMemoryLeaseManager())
    ref = RunRef("team-a", "s-1", "run-1")
    now, done = [100.0], [False]
    notice = WaitNotice(runs, ref, untouched=lambda: not done[0], clock=lambda: now[0])
    notice("share")
    now[0] += YIELD_AFTER_S
    notice("requests")  # the share's wait is broken: it counts again from the next one
    notice("share")
    now[0] += YIELD_AFTER_S / 2
    notice("share")  # not yet
    now[0] += YIELD_AFTER_S / 2
    done[0] = True  # it answered a model call in between: it may not leave any more
    notice("share")
    done[0] = False
    with pytest.raises(RunYielded, match="left its worker"):
        notice("share")
    assert runs.waiting_runs() == []  # no longer shown waiting
    # a run that resumed or settled calls first is never told to leave
    stay = WaitNotice(runs, ref, untouched=None, clock=lambda: now[0])
    stay("share")
    now[0] += 10 * YIELD_AFTER_S
    stay("share")
