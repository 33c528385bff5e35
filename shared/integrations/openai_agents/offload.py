"""Blocking storage calls of ``TetherSession``, run in threads of their own.

``asyncio.to_thread`` goes through ``concurrent.futures``: an executor's work item, a future
with a condition variable, and a chain of callbacks back to the loop. On a one-item
``add_items`` that machinery, run by a thread that just woke up, cost about 60 µs of a 400-700
µs call (``bench/agents_session.py``, P13L). Here a call is a queue entry, and its outcome goes
back with one ``call_soon_threadsafe``.

Semantics, as ``asyncio.to_thread`` unless said:

- the call runs in the caller's ``contextvars`` context;
- up to :data:`MAX_THREADS` threads, started as calls find none idle, kept for the next calls;
- a mutation (``settle=True``) whose caller is cancelled still finishes, and the caller's
  ``CancelledError`` is raised once it has, as the SDK's own sessions do (its
  ``_await_mutation``): when the cancellation reaches the caller, the write is done or failed,
  never still running;
- at exit, calls already running finish (up to :data:`EXIT_WAIT_S`); after ``fork`` the child
  starts threads of its own.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

MAX_THREADS = min(32, (os.cpu_count() or 1) + 4)
"""As many as ``asyncio.to_thread``'s default executor keeps."""

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


class _Threads:
    def __init__(self) -> None:
        self.calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self.idle = threading.Semaphore(0)
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def submit(self, call: _Call) -> None:
        self.calls.put(call)
        if self.idle.acquire(blocking=False):
            return  # a thread waits for it
        with self.lock:
            if len(self.threads) < MAX_THREADS:
                thread = threading.Thread(
                    target=self._work, name=f"tether-session-{len(self.threads)}", daemon=True
                )
                thread.start()
                self.threads.append(thread)

    def _work(self) -> None:
        calls = self.calls
        while (call := calls.get()) is not None:
            try:
                result, error = call.run(), None
            except BaseException as exc:  # the caller's to raise, not this thread's
                result, error = None, exc
            self.idle.release()  # before the loop wakes, so that it need not wait for the GIL
            with contextlib.suppress(RuntimeError):  # raised when the caller's loop is closed
                call.loop.call_soon_threadsafe(_settle, call, result, error)
            del call, result, error  # not kept alive while this thread waits

    def stop(self, timeout_s: float) -> None:
        """Let the threads finish the calls they run, then end."""
        with self.lock:
            threads, self.threads = self.threads, []
        for _ in threads:
            self.calls.put(None)
        for thread in threads:
            thread.join(timeout_s / max(1, len(threads)))


_threads = _Threads()


def _after_fork_in_child() -> None:
    global _threads
    _threads = _Threads()  # the parent's threads do not exist here


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(lambda: _threads.stop(EXIT_WAIT_S))


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
        except asyncio.CancelledError as exc:
            cancellation = exc
        except BaseException:  # failed: the caller hears of its cancellation, as the SDK does
            break
    raise cancellation
