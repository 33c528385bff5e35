"""Blocking storage calls of ``TetherSession``, run in threads of their own.

``asyncio.to_thread`` goes through ``concurrent.futures``: an executor's work item, a future
with a condition variable, and a chain of callbacks back to the loop. On a one-item
``add_items`` that machinery, run by a thread that just woke up, cost about 60 µs of a 400-700
µs call (``bench/agents_session.py``, P13L). Here a call is a queue entry, and its outcome goes
back with one ``call_soon_threadsafe``.

Semantics, as ``asyncio.to_thread`` unless said:

- the call runs in the caller's ``contextvars`` context;
- one pool for the process, whose threads serve every event loop and are kept for the next
  calls (a script's ``asyncio.run`` per call does not start a thread each time, as it does
  with ``asyncio.to_thread``); up to :data:`MAX_THREADS` calls run at once, more wait;
- except a call made from one of these threads (a nested event loop): it always gets a thread,
  so that calls waiting for nested ones cannot hold every thread;
- a mutation (``settle=True``) whose caller is cancelled still finishes, and the caller's
  first ``CancelledError`` is raised once it has, as the SDK's own sessions do (its
  ``_await_mutation``): when the cancellation reaches the caller, the write is done or failed,
  never still running;
- at exit, calls already running finish (all within :data:`EXIT_WAIT_S`), and a call made
  later (by another exit handler) starts a thread of its own; after ``fork`` the child starts
  threads of its own.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

MAX_THREADS = 32
"""Calls run at once (threads are started only as calls find none idle). ``asyncio.to_thread``
keeps up to ``min(32, CPUs + 4)`` per event loop; these serve every loop of the process."""

EXIT_WAIT_S = 10.0
"""How long the interpreter's exit waits for calls still running."""


class _Call:
    """One call: what to run, and where its outcome goes."""

    __slots__ = ("future", "loop", "outcome", "run")

    def __init__(self, loop: asyncio.AbstractEventLoop, run: Callable[[], Any]) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.run = run
        self.outcome: tuple[Any, BaseException | None] | None = None


def _settle(call: _Call, result: Any, error: BaseException | None) -> None:
    """On the caller's loop: record the outcome and hand it to the future awaited now."""
    call.outcome = (result, error)
    future = call.future
    if future.done():  # the caller was cancelled and is not waiting (a read)
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


_own = threading.local()
"""``pool`` set in the threads of a pool."""


class _Threads:
    def __init__(self) -> None:
        self.calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        # under the lock: calls queued and not yet taken, and threads not running a call (a
        # thread starting counts as one): a call needs a new thread when queued > idle
        self.queued = 0
        self.idle = 0

    def submit(self, call: _Call) -> None:
        nested = getattr(_own, "pool", None) is self
        with self.lock:
            self.queued += 1
            if self.queued > self.idle and (len(self.threads) < MAX_THREADS or nested):
                thread = threading.Thread(
                    target=self._work, name=f"tether-session-{len(self.threads)}", daemon=True
                )
                thread.start()
                self.threads.append(thread)
                self.idle += 1
        self.calls.put(call)

    def _work(self) -> None:
        _own.pool = self
        calls, lock = self.calls, self.lock
        while (call := calls.get()) is not None:
            with lock:
                self.queued -= 1
                self.idle -= 1
            try:
                result, error = call.run(), None
            except BaseException as exc:  # the caller's to raise, not this thread's
                result, error = None, exc
            with lock:  # before the loop wakes, so that it need not wait for the GIL
                self.idle += 1
            with contextlib.suppress(RuntimeError):  # raised when the caller's loop is closed
                call.loop.call_soon_threadsafe(_settle, call, result, error)
            del call, result, error  # not kept alive while this thread waits

    def stop(self, timeout_s: float) -> None:
        """Let the threads finish the calls queued and running (within ``timeout_s`` in all),
        then end."""
        with self.lock:
            threads = list(self.threads)
        for _ in threads:
            self.calls.put(None)
        deadline = time.monotonic() + timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


_threads = _Threads()


def _after_fork_in_child() -> None:
    global _threads
    _threads = _Threads()  # the parent's threads do not exist here


def _stop_at_exit() -> None:
    global _threads
    # calls made from here on (by exit handlers that run after this one) go to a pool of their
    # own: this one's threads are ending
    stopping, _threads = _threads, _Threads()
    stopping.stop(EXIT_WAIT_S)


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_stop_at_exit)


async def call_in_thread(function: Callable[..., T], *args: Any, settle: bool = False) -> T:
    """``await asyncio.to_thread(function, *args)``, with less machinery; with ``settle``, a
    cancelled caller waits for the call to end before its ``CancelledError`` is raised."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    call = _Call(loop, lambda: context.run(function, *args))
    _threads.submit(call)
    try:
        result: T = await call.future
        return result
    except asyncio.CancelledError as exc:
        if not settle:
            raise
        cancellation = exc
    while call.outcome is None:  # the call still runs: wait for its end, through cancellations
        call.future = loop.create_future()
        try:
            await call.future
        except asyncio.CancelledError:
            pass  # the first one is raised, as the SDK does
        except BaseException:  # failed: the caller hears of its cancellation, as the SDK does
            break
    raise cancellation
