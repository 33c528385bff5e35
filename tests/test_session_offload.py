"""``call_in_thread``: how ``TetherSession`` runs its blocking storage calls off the event loop
(:mod:`tether.integrations.openai_agents.offload`), held to ``asyncio.to_thread``'s behaviour:
results and errors come back, the caller's context goes along, calls run side by side on a
bounded number of threads, a cancelled read is dropped at once, a thread survives a caller whose
loop is gone, and a forked child runs calls of its own. (A cancelled write waiting for its end is
in ``test_agents_session_contract.py``, on both ``TetherSession`` and ``SQLiteSession``.)"""

from __future__ import annotations

import asyncio
import contextvars
import multiprocessing
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tether.integrations.openai_agents import offload
from tether.integrations.openai_agents.offload import MAX_THREADS, call_in_thread

_who = contextvars.ContextVar("who", default="nobody")


def test_a_result_and_an_error_come_back_as_they_were() -> None:
    async def main() -> tuple[int, str]:
        total = await call_in_thread(sum, [1, 2, 3])
        with pytest.raises(KeyError, match="missing"):
            await call_in_thread({}.__getitem__, "missing")
        name = await call_in_thread(lambda: threading.current_thread().name)
        return total, name

    total, name = asyncio.run(main())
    assert total == 6
    assert name.startswith("tether-session-")  # not the loop's thread


def test_the_call_runs_in_the_callers_context() -> None:
    async def main() -> str:
        _who.set("caller")
        return await call_in_thread(_who.get)

    assert asyncio.run(main()) == "caller"


def test_calls_run_side_by_side_on_at_most_max_threads() -> None:
    calls = 3 * MAX_THREADS
    running, most = 0, 0
    lock = threading.Lock()

    def slow(n: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return n

    async def main() -> list[int]:
        return await asyncio.gather(*(call_in_thread(slow, n) for n in range(calls)))

    assert asyncio.run(main()) == list(range(calls))
    assert 1 < most <= MAX_THREADS
    assert len(offload._threads.threads) <= MAX_THREADS


def test_a_cancelled_read_is_dropped_at_once_and_its_thread_goes_on() -> None:
    release = threading.Event()

    async def main() -> None:
        task = asyncio.ensure_future(call_in_thread(release.wait, 10))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task  # without settle=True, as asyncio.to_thread: the call still runs

    loop = asyncio.new_event_loop()
    loop.run_until_complete(main())
    loop.close()  # the call then ends with its caller's loop closed
    release.set()
    assert asyncio.run(call_in_thread(lambda: "still serving")) == "still serving"


def _child(out: multiprocessing.Queue[str]) -> None:
    out.put(asyncio.run(call_in_thread(lambda: "child")))


def test_a_forked_child_runs_calls_of_its_own() -> None:
    assert asyncio.run(call_in_thread(lambda: "parent")) == "parent"  # threads started here
    context = multiprocessing.get_context("fork")
    out: multiprocessing.Queue[str] = context.Queue()
    child = context.Process(target=_child, args=(out,))
    child.start()
    try:
        assert out.get(timeout=30) == "child"
    finally:
        child.join(30)
    assert child.exitcode == 0


def test_calls_waiting_for_nested_calls_cannot_hold_every_thread() -> None:
    """A call that runs an event loop of its own and waits there for another call: with every
    thread of the pool running such a call, the nested ones still get threads (they waited
    forever for one)."""

    def outer(n: int) -> int:
        return asyncio.run(call_in_thread(lambda: n))

    async def main() -> list[int]:
        return await asyncio.gather(*(call_in_thread(outer, n) for n in range(MAX_THREADS + 2)))

    done: list[list[int]] = []
    runner = threading.Thread(target=lambda: done.append(asyncio.run(main())), daemon=True)
    runner.start()
    runner.join(120)
    assert done == [list(range(MAX_THREADS + 2))]


def test_a_cancelled_write_raises_its_first_cancellation() -> None:
    release = threading.Event()

    async def main() -> None:
        task = asyncio.ensure_future(call_in_thread(release.wait, 10, settle=True))
        await asyncio.sleep(0.1)
        for message in ("first", "second", "third"):
            task.cancel(message)
            await asyncio.sleep(0.05)
        release.set()
        with pytest.raises(asyncio.CancelledError) as raised:
            await task
        assert raised.value.args == ("first",)  # as the SDK's _await_mutation keeps it

    asyncio.run(main())


_AT_EXIT = """
import asyncio, atexit, sys, threading, time
from pathlib import Path

def late_handler():  # registered first, so it runs after offload's own exit handler
    print(asyncio.run(call_in_thread(lambda: "served after the pool stopped")), flush=True)

atexit.register(late_handler)
from tether.integrations.openai_agents.offload import MAX_THREADS, call_in_thread

async def warm():  # several threads, idle by the time the program ends
    await asyncio.gather(*(call_in_thread(time.sleep, 0.2) for _ in range(6)))

asyncio.run(warm())

running = threading.Event()

def write_slowly():
    running.set()
    time.sleep(2.5)
    Path(sys.argv[1]).write_text("written")

def writer():  # a write still running when the main thread ends
    asyncio.run(call_in_thread(write_slowly, settle=True))

threading.Thread(target=writer, daemon=True).start()
assert running.wait(60)
"""


def test_at_exit_a_running_write_finishes_and_later_calls_are_served(tmp_path: Path) -> None:
    """The exit wait is one budget for all threads (each thread got its share of it, so a
    write of 2.5 s was cut with six threads), and a call made by an exit handler that runs
    after the pool stopped is served (it waited forever: an idle thread's permit was left)."""
    script = tmp_path / "at_exit.py"
    script.write_text(_AT_EXIT)
    out = tmp_path / "written.txt"
    done = subprocess.run(
        [sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text() == "written"
    assert "served after the pool stopped" in done.stdout
