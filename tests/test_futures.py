"""RunHandle is a real concurrent.futures.Future; Agent.run_async never delays interpreter exit.

Acceptance of issue #17: ``concurrent.futures.wait`` and ``as_completed`` over 200 distributed
handles on real workers, ``asyncio.wrap_future`` on a handle, and a process that used
``Agent.run_async`` exiting within 1 s of its last result (measured on a real subprocess).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import subprocess
import sys
import textwrap
import time

from tests.support.stack import Stack, unique
from tether.core.results import RunStatus
from tether.errors import SessionBusy
from tether.producer.client import Producer

#: The longest a process may take to exit after its last run_async result (issue #17).
MAX_EXIT_S = 1.0


def test_wait_and_as_completed_over_200_distributed_handles(live_stack: Stack) -> None:
    sessions = [unique("fut") for _ in range(20)]
    # a fresh producer: its listener is started by wait() itself, through the waiter hook
    with Producer(live_stack.settings) as producer:
        handles = [
            producer.run_async(sessions[i % 20], f"remember f{i // 20}", agent="notes")
            for i in range(200)
        ]
        assert all(isinstance(h, concurrent.futures.Future) for h in handles)
        started = time.monotonic()
        done, not_done = concurrent.futures.wait(handles, timeout=120)
        waited_s = time.monotonic() - started
        assert not not_done and done == set(handles)
        assert all(h.result().status is RunStatus.COMPLETED for h in handles)

        # as_completed on handles nobody asked yet: reattached by run id, already finished
        again = [producer.handle(h.run_id) for h in handles]
        seen = [h.run_id for h in concurrent.futures.as_completed(again, timeout=60)]
        assert sorted(seen) == sorted(h.run_id for h in handles)
    print(f"\nconcurrent.futures.wait over 200 distributed handles: {waited_s:.2f} s")
    recalled = live_stack.producer.run(sessions[0], "recall", agent="notes", wait_s=60).output
    assert recalled == "\n".join(f"f{k}" for k in range(10))


def test_as_completed_yields_in_completion_order_and_wait_first_exception(
    live_stack: Stack,
) -> None:
    producer = live_stack.producer
    sid = unique("slow")
    slow = producer.run_async(sid, "sleep 1.5", agent="sleepy")
    failing = producer.run_async(sid, "hi", agent="echo", on_busy="reject")  # refused at once
    fast = producer.run_async(unique("fast"), "hi", agent="echo")
    order = list(concurrent.futures.as_completed([slow, failing, fast], timeout=60))
    assert order[-1] is slow and set(order) == {slow, failing, fast}
    done, _ = concurrent.futures.wait(
        [producer.handle(slow.run_id), failing], return_when="FIRST_EXCEPTION"
    )
    assert failing in done
    assert isinstance(failing.exception(), SessionBusy)
    assert failing.run_result().status is RunStatus.FAILED


def test_a_cancelled_handle_is_a_cancelled_future(live_stack: Stack) -> None:
    producer = live_stack.producer
    sid = unique("fcancel")
    running = producer.run_async(sid, "sleep 1", agent="sleepy")
    queued = producer.run_async(sid, "hello", agent="echo")
    called: list[concurrent.futures.Future[object]] = []
    queued.add_done_callback(called.append)
    assert queued.cancel() is True
    assert queued.cancelled() and queued.done() and called == [queued]
    done, _ = concurrent.futures.wait([queued, running], return_when="FIRST_COMPLETED")
    assert queued in done
    assert queued.run_result().status is RunStatus.CANCELLED
    assert queued.cancel() is True  # Future semantics: cancelled before it started stays so
    assert running.result(timeout=60).status is RunStatus.COMPLETED


def test_wrap_future_and_await_in_asyncio(live_stack: Stack) -> None:
    producer = live_stack.producer
    sid = unique("wrap")
    first = producer.run_async(sid, "remember a", agent="notes")
    second = producer.run_async(sid, "recall", agent="notes")

    async def main() -> tuple[str | None, str | None]:
        wrapped = asyncio.wrap_future(first)
        assert isinstance(wrapped, asyncio.Future)
        result = await asyncio.wait_for(wrapped, timeout=60)
        recalled = await second  # awaiting the handle directly
        return result.output, recalled.output

    assert asyncio.run(main()) == ("noted: a", "a")


EXIT_SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    from tether import Agent, ModelResponse, ScriptedModel

    release = threading.Event()

    class Stuck:
        # a model call that never returns: a run still in flight when the process ends
        def complete(self, request):
            release.wait()
            return ModelResponse.final("never")

    quick = Agent(ScriptedModel([], default_text="ok"))
    stuck = Agent(Stuck())
    pending = [stuck.run_async("hang") for _ in range(2)]
    results = [quick.run_async(f"hi {i}") for i in range(20)]
    outputs = {f.result(timeout=30).output for f in results}
    assert outputs == {"ok"}, outputs
    print(time.monotonic(), flush=True)  # the last result is in: exit from here
    """
)


def test_a_process_that_used_run_async_exits_within_one_second_of_its_last_result() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", EXIT_SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    exited = time.monotonic()  # CLOCK_MONOTONIC: the same clock in both processes
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    last_result = float(line)
    exit_s = exited - last_result
    print(f"\nrun_async process: exited {exit_s * 1000:.0f} ms after its last result")
    assert exit_s < MAX_EXIT_S


def test_daemon_executor_keeps_the_executor_contract() -> None:
    from tether.runtime.agent import DaemonThreadExecutor

    executor = DaemonThreadExecutor(max_workers=2)
    futures = [executor.submit(pow, 2, n) for n in range(10)]
    assert [f.result(timeout=10) for f in futures] == [2**n for n in range(10)]
    assert list(executor.map(str, [1, 2])) == ["1", "2"]
    failing = executor.submit(int, "x")
    assert isinstance(failing.exception(timeout=10), ValueError)
    executor.shutdown(wait=True)
    assert all(not t.is_alive() for t in executor._threads)
    try:
        executor.submit(int, "1")
    except RuntimeError as exc:
        assert "shutdown" in str(exc)
    else:
        raise AssertionError("submit after shutdown must fail")
