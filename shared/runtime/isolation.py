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
back, as JSON (never pickle), behind its length: the call is over once the whole reply is in (or
the child has exited), not at the pipe's end of file, which a process the tool forked would hold
off until it exits itself. A fork costs a few milliseconds, so isolation is opt-in per tool.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import struct
import time
from typing import TYPE_CHECKING

from tether.core.items import ToolCall

if TYPE_CHECKING:
    from tether.runtime.tools import Tool, ToolContext, ToolOutcome

#: Isolated calls without any limit still get one: a child nobody waits for forever is a leak.
DEFAULT_ISOLATED_TIMEOUT_S = 300.0
_CHUNK = 1 << 16
#: The reply's length, ahead of it.
_HEADER = struct.Struct(">Q")


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
    exited = _exit_fd(pid)
    try:
        raw = _read_reply(read_fd, exited, time.monotonic() + limit_s)
    finally:
        os.close(read_fd)
        if exited is not None:
            os.close(exited)
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


def _exit_fd(pid: int) -> int | None:
    """A descriptor that turns readable when child ``pid`` exits (None where the system has no
    pidfd: then a child that dies without a reply is seen at end of file or at the limit)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _read_reply(fd: int, exited: int | None, deadline: float) -> bytes | None:
    """The child's reply, once all of it is in; empty when the child exited or closed the pipe
    before it was (it crashed); None past ``deadline``."""
    data = bytearray()
    # poll, not select: a busy worker may hold descriptors past select's limit of 1024
    poller = select.poll()
    for watched in (fd,) if exited is None else (fd, exited):
        poller.register(watched, select.POLLIN)
    while not _complete(data):
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return None
        ready = {ready_fd for ready_fd, _ in poller.poll(max(1, int(left_s * 1000)))}
        if not ready:
            return None
        if fd not in ready:
            break  # the child exited, and all it wrote is in the pipe (already read): no reply
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            break
        data += chunk
    return bytes(data[_HEADER.size :]) if _complete(data) else b""


def _complete(data: bytearray) -> bool:
    """Whether ``data`` holds a whole reply behind its header."""
    return len(data) >= _HEADER.size and len(data) >= _HEADER.size + _HEADER.unpack_from(data)[0]


def _reply(fd: int, outcome: ToolOutcome) -> None:
    reply = {
        "output": outcome.output,
        "ok": outcome.ok,
        "status": outcome.status,
        "error": outcome.error,
    }
    body = json.dumps(reply).encode("utf-8")
    data = _HEADER.pack(len(body)) + body
    while data:
        data = data[os.write(fd, data) :]
    os.close(fd)
