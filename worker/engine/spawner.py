"""The worker's spawner behind ``ctx.spawn`` (see :mod:`tether.worker.engine.child_runs` for a
child's life after it): the child's ids derive from the parent's call
(:func:`~tether.runtime.children.child_key`); the worker checks the tenant's limits
(``max_child_depth``, ``max_children_per_run``: a refusal names the limit and writes nothing).
At ``ctx.wait`` (or the run's end) the children spawned so far are recorded in the parent's
family record, then submitted in one batch as runs
registered in their sessions' queues (so ``TETHER_REGISTERED_RUNS_ONLY`` holds). A call
executed again submits the same request ids: duplicates the queue drops, so a child runs once.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pydantic
from pydantic import JsonValue

from tether.core.events import EventType, ToolResultPayload, now_ms
from tether.core.waits import ChildRef
from tether.errors import InvalidId, ToolError
from tether.ids import validate_id
from tether.runs.contract import ParentLink, RunRequest
from tether.runs.options import RUN_OPTIONS
from tether.runs.queue.base import SubmitState
from tether.runs.usage.policy import policy_of
from tether.runs.waits.children import PARENT_ATTRIBUTE, SpawnedChild
from tether.runtime.children import ToolCall, child_key, child_session_id
from tether.runtime.session import AgentSession
from tether.settings import Settings
from tether.worker.engine.services import EngineServices

log = logging.getLogger(__name__)

#: Run options a child does not take from ``ctx.spawn``: the worker derives them.
_DERIVED = frozenset({"agent", "tenant", "request_id"})


def child_limits(settings: Settings, tenant: str) -> tuple[tuple[int, str], tuple[int, str]]:
    """The deepest a child of ``tenant`` may nest and how many children one run may spawn,
    each with the setting that says so (the tenant's own when it sets a lower one)."""
    depth = (settings.max_child_depth, "TETHER_MAX_CHILD_DEPTH")
    count = (settings.max_children_per_run, "TETHER_MAX_CHILDREN_PER_RUN")
    policy = policy_of(settings, tenant)
    if policy is None:
        return depth, count
    if policy.max_child_depth is not None and policy.max_child_depth < depth[0]:
        depth = (policy.max_child_depth, f"max_child_depth of tenant {tenant!r}")
    if policy.max_children_per_run is not None and policy.max_children_per_run < count[0]:
        count = (policy.max_children_per_run, f"max_children_per_run of tenant {tenant!r}")
    return depth, count


class WorkerSpawner:
    """Submits the child runs of one run's tools (a
    :class:`~tether.runtime.children.ChildSpawner`)."""

    def __init__(
        self, services: EngineServices, request: RunRequest, trace: dict[str, str] | None
    ) -> None:
        self._services = services
        self._request = request
        self._trace = trace
        self._lock = threading.Lock()
        self._spawned = 0
        self._per_call: dict[tuple[int, str], int] = {}
        self._pending: list[tuple[SpawnedChild, RunRequest]] = []

    def spawn(
        self,
        ctx: ToolCall,
        agent: str,
        input: str | None,
        *,
        session_id: str | None,
        detached: bool,
        options: dict[str, Any],
    ) -> ChildRef:
        book = self._services.children
        if book is None or ctx.session_id is None:
            raise ToolError("ctx.spawn needs the fleet's child record (this worker has none)")
        depth = (self._request.parent.depth if self._request.parent else 0) + 1
        n = self._take(ctx, depth)
        key = child_key(ctx, n)
        request = self._child_request(ctx, key, agent, input, session_id, detached, options)
        assert request.parent is not None
        ref = ChildRef(
            tenant=request.tenant,
            session_id=request.session_id,
            run_id=request.run_id,
            agent=agent,
            detached=detached,
        )
        spawn = SpawnedChild(
            child=ref,
            parent_run_id=self._request.run_id,
            call_id=ctx.call_id,
            spawned_at_ms=now_ms(),
        )
        with self._lock:
            self._pending.append((spawn, request))
        return ref

    def flush(self, dropped_calls: frozenset[str] = frozenset()) -> None:
        """Record the children spawned since the last flush with their parent, then submit
        them, in one batch each (idempotent: a child submitted again is a duplicate the queue
        drops); those of ``dropped_calls`` (calls that failed) are dropped."""
        with self._lock:
            pending = [p for p in self._pending if p[0].call_id not in dropped_calls]
            self._pending = []
        book = self._services.children
        if not pending or book is None:
            return
        parent = self._request
        book.spawned(parent.tenant, parent.session_id, [s for s, _ in pending])
        services = self._services
        requests = [r for _, r in pending]
        outcomes = services.runs.submit_many(requests, queue=services.settings.queue)
        queued: list[tuple[str, str]] = []
        for request, outcome in zip(requests, outcomes, strict=True):
            if outcome.state is SubmitState.QUEUED:
                queued.append((request.tenant, request.session_id))
            elif outcome.state is not SubmitState.DUPLICATE:
                log.warning("child run %s was not queued: %s", request.run_id, outcome.state)
        if services.wake_many is not None:
            services.wake_many(queued, services.settings.queue)
        else:
            for tenant, session_id in queued:
                services.wake(tenant, session_id)

    def _take(self, ctx: ToolCall, depth: int) -> int:
        """Count one more child of ``ctx``'s call (its order in the call), within the limits.

        Raises:
            ToolError: the child would be too deep, or one too many for this run.
        """
        (max_depth, depth_source), (max_count, count_source) = child_limits(
            self._services.settings, ctx.tenant
        )
        if depth > max_depth:
            raise ToolError(
                f"a child at depth {depth} is deeper than allowed, {max_depth} ({depth_source}); "
                f"do the work in this run, or raise {depth_source}"
            )
        with self._lock:
            if self._spawned >= max_count:
                raise ToolError(
                    f"this run has spawned {self._spawned} children, the most allowed "
                    f"({count_source} = {max_count}); spawn fewer, or raise {count_source}"
                )
            self._spawned += 1
            where = (ctx.step, ctx.call_id if ctx.position is None else f"#{ctx.position}")
            n = self._per_call.get(where, 0)
            self._per_call[where] = n + 1
            return n

    def _child_request(
        self,
        ctx: ToolCall,
        key: str,
        agent: str,
        input: str | None,
        session_id: str | None,
        detached: bool,
        options: dict[str, Any],
    ) -> RunRequest:
        """The child's request (validated here: bad options fail the call, naming them)."""
        unknown = options.keys() - RUN_OPTIONS
        derived = options.keys() & _DERIVED
        if unknown or derived:
            raise ToolError(
                f"ctx.spawn does not take {', '.join(sorted(unknown | derived))}: its options "
                f"are {', '.join(sorted(RUN_OPTIONS - _DERIVED))}"
            )
        parent = self._request
        try:
            child_session = (
                validate_id(session_id, kind="child session id")
                if session_id is not None
                else child_session_id(parent.session_id, key)
            )
            return RunRequest(
                run_id=f"run-child-{key}",
                request_id=f"child-{key}",
                tenant=parent.tenant,
                session_id=child_session,
                agent=agent,
                input=input,
                parent=ParentLink(
                    session_id=parent.session_id,
                    run_id=parent.run_id,
                    call_id=ctx.call_id,
                    depth=(parent.parent.depth if parent.parent else 0) + 1,
                    detached=detached,
                ),
                trace=self._trace,
                **options,
            )
        except (pydantic.ValidationError, InvalidId, ValueError) as exc:
            raise ToolError(f"ctx.spawn: the child's request is not valid: {exc}") from exc


def failed_calls(session: AgentSession, run_id: str) -> frozenset[str]:
    """The calls of run ``run_id`` whose tool failed (their unsubmitted children are dropped)."""
    return frozenset(
        e.payload.item.call_id
        for e in session.events
        if e.run_id == run_id
        and e.type is EventType.TOOL_RESULT
        and isinstance(e.payload, ToolResultPayload)
        and not e.payload.ok
    )


def mark_child(session: AgentSession, request: RunRequest) -> None:
    """Mark a child's session with its parent (metadata attribute :data:`PARENT_ATTRIBUTE`,
    stored with the head: ``tether sessions show``, ``tether sessions list --parents``)."""
    parent = request.parent
    if parent is None:
        return
    mark: dict[str, JsonValue] = {
        "session_id": parent.session_id,
        "run_id": parent.run_id,
        "call_id": parent.call_id,
        "depth": parent.depth,
        "child_run_id": request.run_id,
    }
    if session.metadata.attributes.get(PARENT_ATTRIBUTE) != mark:
        session.put_metadata(PARENT_ATTRIBUTE, mark)
