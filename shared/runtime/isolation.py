"""Tool calls in a child process that is killed at the time limit (tools declared ``isolated``).

A thread cannot be stopped, and code that never releases the GIL (a big-integer power, a regex
that backtracks, a C extension) cannot even be waited on from another thread of its process: the
run's timeout, the cancel check and the lease heartbeat all stall behind it. An isolated call runs
in a forked child instead; the worker thread waits on a pipe (releasing the GIL), and past the
limit the child is SIGKILLed, so no process goes on computing a call whose run has moved on.

The child leads a process group of its own, and the whole group is SIGKILLed when the call ends
(at the limit or not): a process the tool started (a shell command, a helper server) never
outlives its call. A process that leaves the group on purpose (``setsid``) is its own business.

The child inherits the tool, its arguments and its context by ``fork``; only the outcome crosses
back, as JSON (never pickle). A fork costs a few milliseconds, so isolation is opt-in per tool.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
from typing import TYPE_CHECKING

from tether.core.items import ToolCall

if TYPE_CHECKING:
    from tether.runtime.tools import Tool, ToolContext, ToolOutcome

#: Isolated calls without any limit still get one: a child nobody waits for forever is a leak.
DEFAULT_ISOLATED_TIMEOUT_S = 300.0
_CHUNK = 1 << 16


def run_isolated(
    tool: Tool, call: ToolCall, context: ToolContext | None, timeout_s: float | None
) -> ToolOutcome:
    """Execute ``call`` in a forked child; SIGKILL it and fail the call past ``timeout_s``."""
    from tether.runtime.tools import ToolOutcome, failed

    limit_s = timeout_s if timeout_s is not None else DEFAULT_ISOLATED_TIMEOUT_S
    # os.fork, not multiprocessing: Celery's prefork children are daemonic to multiprocessing,
    # which refuses to give them children
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, reply, exit without the parent's atexit handlers
        try:
            os.setpgid(0, 0)  # its own group, so the kill below reaches what it starts
            os.close(read_fd)
            _reply(write_fd, tool.execute(call, context))
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        raw = _read_until(read_fd, time.monotonic() + limit_s)
    finally:
        os.close(read_fd)
        _kill_group(pid)
        os.waitpid(pid, 0)
    if raw is None:
        return failed(
            call,
            "ToolTimeout",
            f"isolated tool call exceeded its limit of {limit_s} s and was killed",
        )
    try:
        reply = json.loads(raw)
        return ToolOutcome(
            call=call,
            output=str(reply["output"]),
            ok=bool(reply["ok"]),
            status=reply["status"],
            error=reply.get("error"),
        )
    except (ValueError, KeyError, TypeError):
        return failed(call, "ToolCrashed", "isolated tool process exited without a result")


def _kill_group(pid: int) -> None:
    """SIGKILL the child and every process of its group (it may not have made the group yet)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.setpgid(pid, pid)  # the parent sets it too: no race with a child killed before it did
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)  # a no-op for a child that already exited


def _read_until(fd: int, deadline: float) -> bytes | None:
    """Everything the child writes until it closes the pipe; None past ``deadline``."""
    chunks: list[bytes] = []
    while True:
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left_s)
        if not ready:
            return None
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _reply(fd: int, outcome: ToolOutcome) -> None:
    reply = {
        "output": outcome.output,
        "ok": outcome.ok,
        "status": outcome.status,
        "error": outcome.error,
    }
    data = json.dumps(reply).encode("utf-8")
    while data:
        data = data[os.write(fd, data) :]
    os.close(fd)
