"""A run whose worker dies at any commit step is counted once: its tenant's day (memory; Redis
and S3 marked slow, in ``make test-long``) and the token metrics hold its calls exactly once
after the recovery, whichever worker finished it, and however often the request was
redelivered."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import pytest
from prometheus_client import REGISTRY

from tests.support.crash import (
    Backends,
    PowerSwitch,
    SimulatedCrash,
    crash_at,
    memory_backends,
    worker_runtime,
)
from tests.support.spend_agents import CALL, PRICED, TETHER_AGENTS
from tests.test_crash_steps import CRASH_POINTS
from tether.ids import new_id
from tether.runs.contract import RunRequest
from tether.runs.queue.base import submit
from tether.runtime.registry import AgentRegistry
from tether.settings.budgets import TenantBudget
from tether.worker.engine.commit import CommitStep
from tether.worker.engine.cycle import drain


def apply(
    backends: Backends, worker_id: str, request: RunRequest, budgets: str = "", **kw: object
) -> None:
    registry = AgentRegistry(dict(TETHER_AGENTS))
    rt = worker_runtime(backends, worker_id, registry=registry, **kw)  # type: ignore[arg-type]
    if budgets:  # a tenant budget the worker enforces when the run starts
        rt = dataclasses.replace(
            rt, settings=rt.settings.model_copy(update={"tenant_budgets": budgets})
        )
    submit(rt.runs, request)
    drain(rt, request.tenant, request.session_id)


def input_tokens(tenant: str) -> float:
    labels = {"model": PRICED, "kind": "input", "tenant": tenant}
    return REGISTRY.get_sample_value("tether_model_tokens_total", labels) or 0.0


@pytest.mark.parametrize(("step", "phase"), CRASH_POINTS, ids=lambda v: str(v))
def test_a_run_dead_at_any_commit_step_is_counted_once(step: CommitStep, phase: str) -> None:
    counted_once(memory_backends(), step, phase)


@pytest.mark.slow
@pytest.mark.parametrize("make_backends", ["redis+s3"], indirect=True)
@pytest.mark.parametrize(("step", "phase"), CRASH_POINTS, ids=lambda v: str(v))
def test_the_same_on_redis_and_s3(
    make_backends: Callable[[], Backends], step: CommitStep, phase: str
) -> None:
    counted_once(make_backends(), step, phase)


def counted_once(backends: Backends, step: CommitStep, phase: str) -> None:
    """Kill a worker at ``phase`` of ``step``, recover twice; check the counts: the day's
    usage, the token metrics, and the run's place in its tenant's ``runs_per_minute`` (#47:
    taken when the run starts; a recovered attempt takes none again, or, under a rate of one,
    the run would wait a minute for its own place)."""
    tenant = new_id("t").replace("-", "")[:12]
    budgets = json.dumps({tenant: {"runs_per_minute": 1}})
    run_id = new_id("run")
    request = RunRequest(
        run_id=run_id, request_id=run_id, tenant=tenant, session_id="s-1", agent="spender",
        input="steps=1",
    )  # fmt: skip
    switch = PowerSwitch()
    with crash_at(step, phase, "w1", switch) as fired, pytest.raises(SimulatedCrash):
        apply(backends, "w1", request, budgets, switch=switch)
    assert fired, f"the cycle never reached {phase} {step}"
    backends.expire_lease(tenant, "s-1")
    apply(backends, "w2", request, budgets)
    apply(backends, "w3", request, budgets)  # redelivered once more

    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None
    assert view.result.usage == CALL + CALL
    day = backends.runs.tenant_usage.day(tenant)
    assert (day.runs, day.tokens) == (1, 2 * 1100)
    # once: by the worker that committed, or the one that finished it from the head; a worker
    # that died between its finish and the count (the end of its commit) loses the count
    lost = step in _AFTER_FINISH or (step, phase) == (CommitStep.FINISH, "after")
    assert input_tokens(tenant) == (0 if lost else 2000)
    # the run took one place of the rate, across every attempt: the next run has none now
    budget = TenantBudget(runs_per_minute=1)
    assert backends.runs.tenant_usage.take_rate(tenant, budget, run_id).admitted
    assert not backends.runs.tenant_usage.take_rate(tenant, budget, "run-next").admitted


_AFTER_FINISH = {CommitStep.ARCHIVE_SEGMENT, CommitStep.ARCHIVE_HINT, CommitStep.CHECKPOINT_CLEAR}
