"""A model client that waits for its model's fleet-wide budget before every call.

:class:`BudgetedModel` wraps any :class:`~tether.models.base.ModelClient`: before a call it asks
the :class:`~tether.runs.limits.base.ModelBudget` to admit it (on an estimate of its tokens),
sleeps as told while it is not admitted, and settles the call with the tokens it really used.
A 429 from the provider pauses the model for the whole fleet (its ``Retry-After``, else
:data:`DEFAULT_PAUSE_S`) and the call waits its turn again, up to ``max_429_retries`` times.
For that a 429 must reach the gate: calls of a limited model go to the client's
:meth:`~RateLimitSurfacing.surfacing_rate_limits` twin (the OpenAI clients: the SDK retries no
429, still its 5xx, timeouts and connection errors), not to one whose SDK would wait the 429 out
inside one process, hidden from the fleet, while every other worker kept sending.

While a call waits, :data:`budget_waits` (set by the worker for the run it executes) hears the
reason, then ``None`` once admitted: the worker shows "waiting for model budget" and counts it;
its lease keeper keeps the lease meanwhile. :data:`budget_tenant` (set by the worker too) names
the tenant whose fair share of the limit the call takes (:mod:`~tether.runs.limits.shares`).
"""

from __future__ import annotations

import contextvars
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol, cast, runtime_checkable

from tether.errors import ModelError
from tether.models.base import (
    DeltaSink,
    ModelClient,
    ModelRequest,
    ModelResponse,
    StreamingModelClient,
    billed_usage,
)
from tether.runs.limits.base import ModelBudget, WaitReason
from tether.runs.limits.shares import DEFAULT_TENANT
from tether.settings.limits import ModelLimits

#: A 429 without ``Retry-After`` pauses the model this long.
DEFAULT_PAUSE_S = 1.0
#: The longest a 429's ``Retry-After`` pauses a model for the whole fleet (s); a longer one
#: fails the call instead (the openai SDK does not retry past two minutes either): one
#: provider's or proxy's day-long header must not hold every worker's slots for a day.
MAX_PAUSE_S = 120.0
#: The longest single sleep while waiting: the wait hook hears from the waiter at least this often.
MAX_SLEEP_S = 1.0
#: Characters per token in the admission estimate (settled with the real count afterwards).
CHARS_PER_TOKEN = 4
#: Output tokens assumed by the estimate.
OUTPUT_ESTIMATE = 256

WaitHook = Callable[[WaitReason | None], None]
#: The hook of the run being executed on this thread (None: nobody listens).
budget_waits: contextvars.ContextVar[WaitHook | None] = contextvars.ContextVar(
    "tether_budget_waits", default=None
)
#: The tenant of the run being executed on this thread, whose fair share its calls take.
budget_tenant: contextvars.ContextVar[str] = contextvars.ContextVar(
    "tether_budget_tenant", default=DEFAULT_TENANT
)


@runtime_checkable
class RateLimitSurfacing(Protocol):
    """A model client that can hand 429s to its caller instead of retrying them itself."""

    def surfacing_rate_limits(self) -> ModelClient:
        """The same client, except that a 429 is raised (a :class:`ModelError` with
        ``status == 429`` and its ``retry_after_s``) at the provider's first answer."""


def estimate_tokens(request: ModelRequest) -> int:
    """A cheap over-estimate of a call's tokens: its text length over 4, plus an answer."""
    chars = len(request.system_prompt or "") + len(request.summary or "")
    for item in request.items:
        chars += len(item.model_dump_json())
    return chars // CHARS_PER_TOKEN + OUTPUT_ESTIMATE


class BudgetedModel:
    """``inner`` behind its model's fleet-wide budget (only models with limits are wrapped).

    Args:
        inner: the model client.
        budget: the fleet's budget.
        limits: the configured limits; the request's model name picks its limit.
        max_429_retries: how many 429s one call waits out before it fails.
        sleep: injectable for tests.
    """

    def __init__(
        self,
        inner: ModelClient,
        budget: ModelBudget,
        limits: ModelLimits,
        *,
        max_429_retries: int = 8,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.inner = inner
        # limited models' calls: their 429s must reach _call (see the module's docstring)
        self._surfacing = (
            inner.surfacing_rate_limits() if isinstance(inner, RateLimitSurfacing) else inner
        )
        self._budget = budget
        self._limits = limits
        self._max_429_retries = max_429_retries
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"BudgetedModel({self.inner!r})"

    def complete(self, request: ModelRequest) -> ModelResponse:
        return self._call(request, lambda model: model.complete(request))

    def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        if getattr(self.inner, "stream", None) is None:
            return self.complete(request)
        return self._call(
            request, lambda model: cast(StreamingModelClient, model).stream(request, on_delta)
        )

    def _call(
        self, request: ModelRequest, call: Callable[[ModelClient], ModelResponse]
    ) -> ModelResponse:
        limit = self._limits.for_model(request.model)
        if limit is None:
            return call(self.inner)
        estimate = estimate_tokens(request)
        for attempt in range(self._max_429_retries + 1):
            token = uuid.uuid4().hex
            self._wait_for_admission(request.model, token, estimate)
            correction = 0  # unknown (a call cut short): the estimate stays charged
            try:
                response = call(self._surfacing)
                correction = response.usage.input_tokens + response.usage.output_tokens - estimate
                return response
            except ModelError as exc:
                billed = billed_usage(exc)
                if billed is not None:  # an answer the client could not use, billed all the same
                    correction = billed.input_tokens + billed.output_tokens - estimate
                elif _status(exc) is not None:
                    # the provider answered with an error: it processed no tokens, so none stay
                    # charged (a 429 kept a whole prompt's estimate, holding every worker back)
                    correction = -estimate
                if _status(exc) != 429 or attempt == self._max_429_retries:
                    raise
                pause_s = _retry_after_s(exc) or DEFAULT_PAUSE_S
                if pause_s > MAX_PAUSE_S:
                    raise ModelError(
                        f"model {request.model!r} answered 429 with Retry-After {pause_s:.0f} s, "
                        f"longer than the {MAX_PAUSE_S:.0f} s Tether pauses a model for the "
                        "whole fleet: the call fails rather than hold every worker; retry the "
                        "run later, or check the provider's quota"
                    ) from None
                self._budget.pause(request.model, pause_s)
            finally:
                self._budget.settle(request.model, limit, token, correction)
        raise AssertionError("unreachable")

    def _wait_for_admission(self, model: str, token: str, estimate: int) -> None:
        limit = self._limits.for_model(model)
        assert limit is not None
        hook = budget_waits.get()
        tenant = budget_tenant.get()
        waited = False
        while True:
            answer = self._budget.admit(model, limit, token, estimate, tenant=tenant)
            if answer.admitted:
                if waited and hook is not None:
                    hook(None)
                return
            if hook is not None:
                hook(answer.reason)
            waited = True
            self._sleep(min(max(answer.wait_s, 0.001), MAX_SLEEP_S))


def _status(exc: ModelError) -> int | None:
    status: Any = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def _retry_after_s(exc: ModelError) -> float | None:
    wait: Any = getattr(exc, "retry_after_s", None)
    return float(wait) if isinstance(wait, int | float) and wait > 0 else None
