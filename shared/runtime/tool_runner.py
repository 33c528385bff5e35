"""Executes one step's tool calls, sequentially or in parallel, returning results in call order."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from tether.core.items import ToolCall
from tether.runtime.tools import Tool, ToolContext, ToolOutcome, failed

#: A validated call with the context it runs in.
Call = tuple[Tool, ToolCall, ToolContext]


def run_with_timeout(
    tool: Tool, call: ToolCall, context: ToolContext, timeout_s: float | None
) -> ToolOutcome:
    """Run one call; past ``timeout_s`` it becomes a FAILED outcome.

    Python cannot kill a thread, so a timed-out tool keeps running in an abandoned daemon thread;
    its late result is discarded.
    """
    if timeout_s is None:
        return tool.execute(call, context)
    box: list[ToolOutcome] = []
    worker = threading.Thread(
        target=lambda: box.append(tool.execute(call, context)),
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
        futures = [pool.submit(run_with_timeout, t, c, ctx, timeout_s) for t, c, ctx in calls]
        return [f.result() for f in futures]
