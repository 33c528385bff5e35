"""#47 B1: a tenant's ``runs_per_minute`` is taken by the worker when a run starts, not only
checked by its producer (a producer that skips the check, or many racing ones, used to start runs
faster than the budget). In-process on memory and on redis-server + S3: a run over the rate is
put back in its queue unstarted (no attempt counted, its record saying when it starts), other
tenants' runs go on, and it starts once the rate has room."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

from tests.support.crash import TENANT, Backends, memory_backends, request_for, worker_runtime
from tether.runs.queue.base import RunState, submit
from tether.runs.usage.memory import InMemoryTenantUsage
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices

BUDGETS = json.dumps({TENANT: {"runs_per_minute": 1}})


def rated_worker(backends: Backends) -> EngineServices:
    services = worker_runtime(backends, "w-rate")
    settings = services.settings.model_copy(update={"tenant_budgets": BUDGETS})
    return dataclasses.replace(services, settings=settings)


def test_a_run_over_its_tenants_rate_waits_unstarted(make_backends: Callable[[], Backends]) -> None:
    backends = make_backends()
    worker = rated_worker(backends)
    first, second = request_for("s-rate-1", "1+1"), request_for("s-rate-2", "2+2")
    other = request_for("s-rate-3", "3+3").model_copy(update={"tenant": "unbudgeted"})
    for request in (first, second, other):  # submitted without any producer-side check
        submit(backends.runs, request)
    assert drain(worker, TENANT, "s-rate-1") == 1
    assert drain(worker, TENANT, "s-rate-2") == 0  # deferred: the rate has no room
    view = backends.runs.get(second.ref)
    assert view is not None and view.result is None and view.status == RunState.QUEUED.value
    assert "deferred" in (view.last_error or "") and "runs_per_minute=1" in (view.last_error or "")
    assert view.retry_at_ms > 0
    assert drain(worker, "unbudgeted", "s-rate-3") == 1  # another tenant's rate is its own
    assert drain(worker, TENANT, "s-rate-2") == 0  # still waiting for its place


def test_a_deferred_run_starts_once_the_rate_has_room() -> None:
    backends = memory_backends()
    clock_us = [1_000_000_000]
    usage = InMemoryTenantUsage(clock_us=lambda: clock_us[0])
    backends.runs.tenant_usage = usage  # type: ignore[attr-defined]
    worker = rated_worker(backends)
    first, second = request_for("s-room-1", "1+1"), request_for("s-room-2", "2+2")
    submit(backends.runs, first)
    submit(backends.runs, second)
    assert drain(worker, TENANT, "s-room-1") == 1
    assert drain(worker, TENANT, "s-room-2") == 0
    clock_us[0] += 60_000_000  # a minute later: one run's place
    assert drain(worker, TENANT, "s-room-2") == 1
    view = backends.runs.get(second.ref)
    assert view is not None and view.result is not None and view.result.output == "4"
    assert view.result.attempts == 1  # the deferral cost no attempt
