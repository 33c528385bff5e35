"""Executes one step's tool calls, sequentially or in parallel, returning results in call order."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from tether.core.items import ToolCall
from tether.observability.tracing import span
from tether.runtime.isolation import run_isolated
from tether.runtime.tools import Tool, ToolContext, ToolOutcome, failed

#: A validated call with the context it runs in.
Call = tuple[Tool, ToolCall, ToolContext]


def run_with_timeout(
    tool: Tool, call: ToolCall, context: ToolContext, timeout_s: float | None
) -> ToolOutcome:
    """Run one call in a ``tether.tool`` span; past ``timeout_s`` it becomes a FAILED outcome.

    Python cannot kill a thread, so a timed-out tool keeps running in an abandoned daemon thread
    (its late result is discarded); a tool declared ``isolated`` runs in a child process that is
    killed at the limit instead.
    """
    attributes = {"gen_ai.tool.name": call.name, "gen_ai.tool.call.id": call.id}
    with span("tether.tool", attributes, step=context.step) as current:
        outcome = _run(tool, call, context, timeout_s)
        current.set_attribute("tether.tool.status", outcome.status)
        return outcome


def _run(tool: Tool, call: ToolCall, context: ToolContext, timeout_s: float | None) -> ToolOutcome:
    if tool.timeout_s is not None:
        timeout_s = tool.timeout_s
    if tool.isolated:
        return run_isolated(tool, call, context, timeout_s)
    if timeout_s is None:
        return tool.execute(call, context)
    box: list[ToolOutcome] = []
    # the tool's thread sees the caller's context (its span), for the tool's own tracing
    here = contextvars.copy_context()
    worker = threading.Thread(
        target=lambda: box.append(here.run(tool.execute, call, context)),
        name=f"tether-tool-{call.id}",
        daemon=True,
    )
    worker.start()
    worker.join(timeout_s)
    if box:
        return box[0]
    return failed(call, "ToolTimeout", f"tool call exceeded tool_timeout_s of {timeout_s} s")


def execute_parallel(
    calls: Sequence[Call], *, max_parallel: int, timeout_s: float | None
) -> list[ToolOutcome]:
    """Execute validated calls in parallel; results come back in call order."""
    workers = max(1, min(max_parallel, len(calls)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tether-tools") as pool:
        # each call in a copy of the caller's context, so its span is a child of the run's
        futures = [
            pool.submit(contextvars.copy_context().run, run_with_timeout, t, c, ctx, timeout_s)
            for t, c, ctx in calls
        ]
        return [f.result() for f in futures]
