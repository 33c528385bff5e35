"""Child runs from a tool: ``ctx.spawn`` starts one, ``ctx.wait`` parks the call on them.

``ctx.spawn(agent, input)`` submits a child run on the fleet (on a worker: a run registered in
the child session's queue, like a wake; see ``tether.worker.engine.child_runs``) and returns its
:class:`~tether.core.waits.ChildRef`. The child's ids derive from the parent's request, the
step, the call's position in it and the spawn's order within the call (:func:`child_key`), so a
call executed again (a crash, a retry, a redo of the step) spawns the same child, which the run
queue drops as a duplicate: a child runs once. ``ctx.wait(children)`` returns the
:class:`~tether.runtime.tools.Waiting` that parks the call (a :class:`~tether.core.waits.WaitFor`
of kind ``children``); the run ends ``WAITING`` without holding a worker, and the last child to
end (``mode="all"``; the first with ``"any"``) wakes it with every child's result as the call's
output (:func:`~tether.core.children.children_output`).

The worker sets the spawner around a run (:func:`child_spawning`); in-process, with no fleet,
``ctx.spawn`` fails the call saying so.
"""

from __future__ import annotations

import contextvars
import hashlib
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, Protocol

from tether.core.events import now_ms
from tether.core.waits import ChildRef, WaitFor
from tether.errors import ToolError


class ToolCall(Protocol):
    """What spawning reads of a call's :class:`~tether.runtime.tools.ToolContext`."""

    @property
    def tenant(self) -> str: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def run_id(self) -> str: ...
    @property
    def request_id(self) -> str | None: ...
    @property
    def step(self) -> int: ...
    @property
    def call_id(self) -> str: ...
    @property
    def position(self) -> int | None: ...
    @property
    def max_wait_s(self) -> float | None: ...
    @property
    def max_wait_source(self) -> str: ...
    @property
    def spawner(self) -> ChildSpawner | None: ...


class ChildSpawner(Protocol):
    """Submits child runs for the tools of one run (the worker's: it knows the run's request,
    its depth, the tenant's limits and the queue)."""

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
        """One child of ``ctx``'s call (idempotent by its derived ids), submitted at the next
        :meth:`flush` at the latest."""

    def flush(self) -> None:
        """Submit the children spawned so far (one batch)."""


_spawner: contextvars.ContextVar[ChildSpawner | None] = contextvars.ContextVar(
    "tether_child_spawner", default=None
)


@contextmanager
def child_spawning(spawner: ChildSpawner | None) -> Iterator[None]:
    """Within this block, tools of runs started here spawn children with ``spawner``."""
    token = _spawner.set(spawner)
    try:
        yield
    finally:
        _spawner.reset(token)


def child_fields() -> dict[str, Any]:
    """The :class:`~tether.runtime.tools.ToolContext` field of the spawner in force (none
    outside :func:`child_spawning`)."""
    spawner = _spawner.get()
    return {} if spawner is None else {"spawner": spawner}


def child_key(ctx: ToolCall, n: int) -> str:
    """The digest the ``n``-th child of ``ctx``'s call derives its ids from: the parent's tenant,
    session, request (its run when it has none), step and the call's position (its call id when
    it has none)."""
    where = ctx.call_id if ctx.position is None else f"#{ctx.position}"
    parts = (
        ctx.tenant,
        ctx.session_id or "",
        ctx.request_id or ctx.run_id,
        str(ctx.step),
        where,
        str(n),
    )
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:24]


def child_session_id(parent_session_id: str, key: str) -> str:
    """The default session of a child: the parent's, with the child's key (a valid id of at
    most 128 characters)."""
    return f"{parent_session_id[:96]}.c-{key[:24]}"


def spawn_child(
    ctx: ToolCall,
    agent: str,
    input: str | None,
    *,
    session_id: str | None = None,
    detached: bool = False,
    options: dict[str, Any],
) -> ChildRef:
    """``ctx.spawn``: submit a child run through the run's spawner.

    Raises:
        ToolError: no fleet runs this run (in-process), or the spawner refused the child
            (over a limit, bad options): nothing was submitted.
    """
    if ctx.spawner is None:
        raise ToolError(
            "ctx.spawn needs the fleet: child runs are submitted by a worker (run the agent "
            "with Producer.run and `tether worker`), not in-process"
        )
    if not isinstance(agent, str) or not agent:
        raise ToolError("ctx.spawn takes the child's agent name, a non-empty string")
    if input is not None and not isinstance(input, str):
        raise ToolError(f"ctx.spawn takes the child's input as text, not {type(input).__name__}")
    return ctx.spawner.spawn(
        ctx, agent, input, session_id=session_id, detached=detached, options=options
    )


def wait_on_children(
    ctx: ToolCall,
    children: ChildRef | Sequence[ChildRef],
    mode: Literal["all", "any"] = "all",
    timeout_s: float | None = None,
) -> WaitFor:
    """``ctx.wait``: the wait that parks the call until ``children`` ended (``all``) or one
    of them (``any``), or ``timeout_s`` passed.

    Raises:
        ToolError: no children, a child of another tenant, an unknown mode, or a timeout that
            is not a positive number or over the run's longest wait.
    """
    if ctx.spawner is not None:  # the children are submitted before the call parks on them
        ctx.spawner.flush()
    refs = (children,) if isinstance(children, ChildRef) else tuple(children)
    if not refs or not all(isinstance(c, ChildRef) for c in refs):
        raise ToolError("ctx.wait takes the ChildRef(s) ctx.spawn returned, at least one")
    if any(c.tenant != ctx.tenant for c in refs):
        raise ToolError("ctx.wait takes children of this run's own tenant")
    if mode not in ("all", "any"):
        raise ToolError(f"ctx.wait's mode is 'all' or 'any', not {mode!r}")
    timeout_at_ms = None
    if timeout_s is not None:
        timeout_at_ms = now_ms() + _timeout_ms(timeout_s, ctx.max_wait_s, ctx.max_wait_source)
    unique = tuple({c.run_id: c for c in refs}.values())
    return WaitFor(kind="children", children=unique, mode=mode, timeout_at_ms=timeout_at_ms)


def _timeout_ms(timeout_s: float, max_wait_s: float | None, source: str) -> int:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise ToolError(f"ctx.wait's timeout_s is a number of seconds, not {timeout_s!r}")
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ToolError(f"ctx.wait's timeout_s is a positive, finite number, not {timeout_s}")
    if max_wait_s is not None and timeout_s > max_wait_s:
        raise ToolError(
            f"a wait of {timeout_s:g} s is over the longest allowed, {max_wait_s:g} s "
            f"({source}); wait less, or raise {source}"
        )
    return math.ceil(timeout_s * 1000)
