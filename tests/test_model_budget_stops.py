"""A run waiting for its model's fleet-wide budget can still be stopped.

The wait is inside a step, where the loop's own checks (cancel, deadline) do not look: a model
paused by a long ``Retry-After`` kept a cancelled run waiting, holding its worker slot, and the
run then completed anyway. The wait now looks for a stop request about once a second and ends
at the run's deadline. In-process, with the real drain cycle on in-memory backends.
"""

from __future__ import annotations

import threading
import time

from tests.support.crash import TENANT, memory_backends, request_for, worker_runtime
from tether import Agent, ModelResponse, ScriptedModel
from tether.runs.limits.gate import BudgetedModel
from tether.runs.limits.memory import InMemoryModelBudget
from tether.runs.queue.base import submit
from tether.runtime.registry import AgentRegistry
from tether.settings.limits import ModelLimits
from tether.worker.engine.cycle import drain

#: Long enough that a run that waits it out is plainly not stopped, short enough to end.
PAUSE_S = 20.0


def _paused_runtime() -> tuple[object, object]:
    budget = InMemoryModelBudget()
    limits = ModelLimits.parse('{"m": {"concurrent_requests": 1}}')
    budget.pause("m", PAUSE_S)  # a 429 said so, a moment ago
    model = BudgetedModel(ScriptedModel([ModelResponse.final("answered")]), budget, limits)
    registry = AgentRegistry({"limited": lambda: Agent(model, model_name="m")})
    backends = memory_backends()
    return worker_runtime(backends, "w1", registry=registry), backends


def test_a_run_cancelled_while_it_waits_for_model_budget_ends_cancelled() -> None:
    rt, _ = _paused_runtime()
    request = request_for("s-wait-cancel", "hi").model_copy(update={"agent": "limited"})
    submit(rt.runs, request)  # type: ignore[attr-defined]

    def cancel_soon() -> None:
        time.sleep(0.5)
        rt.runs.request_cancel(request.ref)  # type: ignore[attr-defined]

    threading.Thread(target=cancel_soon, daemon=True).start()
    started = time.monotonic()
    drain(rt, TENANT, request.session_id)  # type: ignore[arg-type]
    elapsed_s = time.monotonic() - started
    view = rt.runs.get(request.ref)  # type: ignore[attr-defined]
    assert view is not None and view.result is not None
    assert view.result.status == "CANCELLED", view.result
    assert elapsed_s < PAUSE_S / 2


def test_a_run_waiting_for_model_budget_ends_at_its_deadline() -> None:
    rt, _ = _paused_runtime()
    request = request_for("s-wait-deadline", "hi").model_copy(
        update={"agent": "limited", "timeout_s": 1.0}
    )
    submit(rt.runs, request)  # type: ignore[attr-defined]
    started = time.monotonic()
    drain(rt, TENANT, request.session_id)  # type: ignore[arg-type]
    view = rt.runs.get(request.ref)  # type: ignore[attr-defined]
    assert view is not None and view.result is not None
    assert (view.result.status, view.result.error_type) == ("FAILED", "RunTimeout")
    assert time.monotonic() - started < PAUSE_S / 2
