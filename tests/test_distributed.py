"""Distributed runs on real Celery worker processes, a private redis-server and moto over HTTP."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.support.stack import Stack, eventually, unique
from tether.core.events import EventType
from tether.core.results import RunStatus
from tether.errors import InputTooLarge, InvalidInput, SessionBusy, UnknownAgent
from tether.persistence.reader import SessionLogReader
from tether.producer.submission import RunSpec
from tether.runs.queue.base import CancelOutcome


def reader(stack: Stack) -> SessionLogReader:
    return stack.reader()


def facts(stack: Stack, session_id: str) -> list[str]:
    output = stack.producer.run(session_id, "recall", agent="notes", wait_s=60).output or ""
    return output.splitlines()


def assert_verified(stack: Stack, session_id: str) -> None:
    report = reader(stack).verify(session_id)
    assert report.ok, report.problems


def test_multi_turn_notes_across_workers(live_stack: Stack) -> None:
    sid = unique("notes")
    workers = set()
    for n in range(8):
        result = live_stack.producer.run(sid, f"remember fact-{n}", agent="notes", wait_s=60)
        assert result.output == f"noted: fact-{n}"
        workers.add(result.worker)
    assert len(workers) == 2, f"all turns ran on {workers}"
    assert facts(live_stack, sid) == [f"fact-{n}" for n in range(8)]
    rd = reader(live_stack)
    head = rd.read(sid)
    assert head is not None
    assert rd.project(sid) == head.memory
    assert_verified(live_stack, sid)


def test_concurrent_producers_keep_per_producer_order(live_stack: Stack) -> None:
    sid = unique("race")
    threads, per_thread = 10, 20
    handles: list[list] = [[] for _ in range(threads)]  # type: ignore[type-arg]

    def produce(t: int) -> None:
        for i in range(per_thread):
            handles[t].append(
                live_stack.producer.run_async(sid, f"remember p{t}-{i}", agent="notes")
            )

    pool = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    for group in handles:
        for handle in group:
            assert handle.result(timeout=120).status is RunStatus.COMPLETED
    recalled = facts(live_stack, sid)
    assert len(recalled) == threads * per_thread
    assert len(set(recalled)) == threads * per_thread
    for t in range(threads):
        mine = [f for f in recalled if f.startswith(f"p{t}-")]
        assert mine == [f"p{t}-{i}" for i in range(per_thread)]
    assert_verified(live_stack, sid)


def test_same_request_twice_is_applied_once(live_stack: Stack) -> None:
    sid = unique("dup")
    first = live_stack.producer.run(
        sid, "remember once", agent="notes", request_id="req-1", wait_s=60
    )
    again = live_stack.producer.run(
        sid, "remember once", agent="notes", request_id="req-1", wait_s=60
    )
    assert again.run_id == first.run_id
    live_stack.producer.resubmit(first.run_id)  # the identical Celery message, delivered again
    later = live_stack.producer.run(sid, "remember after", agent="notes", wait_s=60)
    assert later.status is RunStatus.COMPLETED
    assert facts(live_stack, sid) == ["once", "after"]
    assert_verified(live_stack, sid)


def test_republished_message_while_queued_is_applied_once(live_stack: Stack) -> None:
    sid = unique("dupq")
    blocker = live_stack.producer.run_async(sid, "sleep 1", agent="sleepy")
    handle = live_stack.producer.run_async(sid, "remember queued", agent="notes")
    live_stack.producer.resubmit(handle.run_id)
    live_stack.producer.resubmit(handle.run_id)
    blocker.result(timeout=60)
    assert handle.result(timeout=60).duplicate is False
    assert facts(live_stack, sid) == ["queued"]


def test_sigkill_mid_run_completes_elsewhere_once(live_stack: Stack) -> None:
    sid = unique("kill")
    live_stack.producer.run(sid, "remember before", agent="notes", wait_s=60)
    handle = live_stack.producer.run_async(sid, "sleep 3", agent="sleepy")
    victim = eventually(lambda: _running_worker(live_stack, handle.run_id), timeout_s=30)
    killed_at = time.monotonic()
    victim.kill()
    result = handle.result(timeout=60)
    recovery_s = time.monotonic() - killed_at
    print(f"\nkill -> completion: {recovery_s:.2f} s (lease TTL 2 s, sweep 0.2 s, run 3 s)")
    assert result.status is RunStatus.COMPLETED
    assert result.attempts == 2
    victim.start()
    history = reader(live_stack).events(sid)
    assert (
        sum(1 for e in history if e.type is EventType.FINAL_OUTPUT and e.run_id == handle.run_id)
        == 1
    )
    assert facts(live_stack, sid) == ["before"]
    assert_verified(live_stack, sid)


def _running_worker(stack: Stack, run_id: str):  # type: ignore[no-untyped-def]
    view = stack.producer.record(run_id)
    if view is None or view.status != "RUNNING":
        return None
    pid = int(
        stack.producer.redis.hget(stack.producer.keys.run(*view.ref), "worker")
        .decode()
        .split(":")[1]
    )  # type: ignore[union-attr]
    for worker in stack.workers:
        if worker.proc is not None and _is_child(pid, worker.proc.pid):
            return worker
    return None


def _is_child(pid: int, parent: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1]) == parent
    except FileNotFoundError:
        return False


def test_zombie_worker_cannot_overwrite(live_stack: Stack) -> None:
    sid = unique("zombie")
    live_stack.producer.run(sid, "remember base", agent="notes", wait_s=60)
    handle = live_stack.producer.run_async(sid, "sleep 2", agent="sleepy")
    zombie = eventually(lambda: _running_worker(live_stack, handle.run_id), timeout_s=30)
    zombie.signal(signal.SIGSTOP)
    try:
        result = handle.result(timeout=60)  # completed by the other worker after the lease expired
        assert result.attempts == 2
        head_before = reader(live_stack).read(sid)
    finally:
        zombie.signal(signal.SIGCONT)
    follow = live_stack.producer.run(sid, "remember after", agent="notes", wait_s=60)
    assert follow.status is RunStatus.COMPLETED
    eventually(lambda: "aborted" in zombie.log_text() or "lost" in zombie.log_text(), timeout_s=30)
    head = reader(live_stack).read(sid)
    assert head is not None and head_before is not None
    runs = [r.run_id for r in head.applied]
    assert runs.count(handle.run_id) == 1
    assert facts(live_stack, sid) == ["base", "after"]
    assert_verified(live_stack, sid)


def test_cancel_queued_and_running(live_stack: Stack) -> None:
    sid = unique("cancel")
    live_stack.producer.run(sid, "remember kept", agent="notes", wait_s=60)
    running = live_stack.producer.run_async(sid, "sleep 2", agent="sleepy")
    queued = live_stack.producer.run_async(sid, "remember never", agent="notes")
    eventually(lambda: running.running(), timeout_s=30)
    assert queued.cancel() is True  # queued: it will never start
    # running: only a request (Future.cancel semantics: it may still finish), so False
    assert running.cancel() is False
    assert live_stack.producer.cancel(running.run_id) is CancelOutcome.REQUESTED
    with pytest.raises(concurrent.futures.CancelledError):
        queued.result(timeout=60)
    assert running.run_result(timeout=60).status is RunStatus.CANCELLED
    assert running.cancelled() and queued.cancelled()
    assert running.cancel() is False
    assert facts(live_stack, sid) == ["kept"]
    history = reader(live_stack).events(sid)
    errors = [e for e in history if e.type is EventType.ERROR and e.run_id == running.run_id]
    assert errors and errors[0].payload.error_type == "RunCancelled"  # type: ignore[union-attr]
    assert_verified(live_stack, sid)


def test_reject_policy_on_busy_session(live_stack: Stack) -> None:
    sid = unique("busy")
    slow = live_stack.producer.run_async(sid, "sleep 1", agent="sleepy")
    eventually(lambda: slow.running(), timeout_s=30)
    rejected = live_stack.producer.run_async(sid, "remember no", agent="notes", on_busy="reject")
    with pytest.raises(SessionBusy, match="busy"):
        rejected.result(timeout=30)
    slow.result(timeout=60)
    accepted = live_stack.producer.run(
        sid, "remember yes", agent="notes", on_busy="reject", wait_s=60
    )
    assert accepted.status is RunStatus.COMPLETED
    assert facts(live_stack, sid) == ["yes"]


def test_bad_requests_fail_clearly_and_workers_keep_serving(live_stack: Stack) -> None:
    sid = unique("bad")
    with pytest.raises(UnknownAgent, match="known agents"):
        live_stack.producer.run(sid, "hi", agent="no-such-agent", wait_s=60)
    with pytest.raises(InputTooLarge, match="over the limit"):
        live_stack.producer.run(sid, "x" * 70_000, agent="echo", wait_s=60)
    with pytest.raises(InvalidInput):
        live_stack.producer.run("../etc", "hi", agent="echo", wait_s=60)
    assert reader(live_stack).read(sid) is None  # nothing reached the session
    big = {
        "run_id": "run-big-1",
        "request_id": "run-big-1",
        "session_id": sid,
        "agent": "echo",
        "input": "y" * 70_000,
    }
    with live_stack.producer.celery.connection_for_write() as conn:
        producer = conn.Producer(serializer="pickle")
        producer.publish(
            {"request": {"x": 1}},
            routing_key="tether",
            exchange="tether",
            headers={"task": "tether.run", "id": "pickled-1"},
            serializer="pickle",
        )
        producer = conn.Producer(serializer="json")
        producer.publish(
            {"not": "celery"},
            routing_key="tether",
            exchange="tether",
            headers={"task": "tether.run", "id": "malformed-1"},
        )
        producer.publish(
            [[], {"request": {"run_id": "run-malformed-2", "session_id": sid, "agent": 7}}, {}],
            routing_key="tether",
            exchange="tether",
            headers={"task": "tether.run", "id": "malformed-2"},
        )
        producer.publish(
            [[], {"request": big}, {}],
            routing_key="tether",
            exchange="tether",
            headers={"task": "tether.run", "id": "run-big-1"},
        )
        producer.publish(
            [[], {}, {}],
            routing_key="tether",
            exchange="tether",
            headers={"task": "tether.unknown_type", "id": "unknown-task-1"},
        )
    # workers act only on registered runs (#47): a hand-made message nobody registered is
    # refused and logged, and nothing is recorded under the tenant it names
    eventually(
        lambda: sum(w.log_text().count("refused") for w in live_stack.workers) >= 3,
        timeout_s=30,
    )
    assert live_stack.producer.record("run-malformed-2") is None
    assert live_stack.producer.record("run-big-1") is None
    # registered with the documented helper, a hand-made message runs; a bad one is refused at
    # the edge, with a clear error, before anything is stored or published
    with pytest.raises(InputTooLarge, match="over the limit"):
        live_stack.producer.register_message(big)
    made = {**big, "run_id": "run-made-1", "request_id": "run-made-1", "input": "by hand"}
    handle = live_stack.producer.register_message(json.dumps(made))
    live_stack.producer.celery.send_task(
        "tether.run", kwargs={"request": json.dumps(made)}, queue="tether", task_id="run-made-1"
    )
    assert handle.result(timeout=60).output == "echo: by hand"
    eventually(lambda: any("pickle" in w.log_text() for w in live_stack.workers), timeout_s=30)
    eventually(
        lambda: any("tether.unknown_type" in w.log_text() for w in live_stack.workers),
        timeout_s=30,
    )
    assert all(w.alive() for w in live_stack.workers)
    assert (
        live_stack.producer.run(sid, "still here", agent="echo", wait_s=60).output
        == "echo: still here"
    )


def test_await_handle_in_asyncio(live_stack: Stack) -> None:
    sid = unique("aio")

    async def main() -> list[str]:
        handles = [
            live_stack.producer.run_async(f"{sid}-{i}", f"hi {i}", agent="echo") for i in range(5)
        ]
        # Submitted last, a run that sleeps 1 s keeps the gather waiting whatever the load: on a
        # busy machine the echo runs had all committed while the submissions were still going on,
        # so the gather returned before the ticker's second tick.
        handles.append(live_stack.producer.run_async(f"{sid}-slow", "sleep 1", agent="sleepy"))
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        results = await asyncio.gather(*handles)  # type: ignore[arg-type]
        task.cancel()
        assert ticks > 1  # the loop kept running while we waited
        assert results[-1].status == "COMPLETED", results[-1]
        return [r.output or "" for r in results[:-1]]

    assert asyncio.run(main()) == [f"echo: hi {i}" for i in range(5)]


def test_handle_from_second_process(live_stack: Stack) -> None:
    sid = unique("reattach")
    handle = live_stack.producer.run_async(sid, "sleep 0.5", agent="sleepy")
    code = (
        "import json,sys\n"
        "from tether.producer.client import Producer\n"
        "p = Producer()\n"
        f"r = p.handle({handle.run_id!r}).result(timeout=60)\n"
        "print(json.dumps({'output': r.output, 'session': r.session_id}))\n"
        "p.close()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=live_stack.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "output": "slept 0.5",
        "session": sid,
    }


def test_submit_many_and_events(live_stack: Stack) -> None:
    sid = unique("bulk")
    specs = [RunSpec(f"{sid}-{i}", f"{i}+{i}", "calculator") for i in range(20)]
    handles = live_stack.producer.submit_many(specs)
    assert [h.result(timeout=60).output for h in handles] == [str(2 * i) for i in range(20)]
    events = list(handles[3].events(idle_timeout_s=10))
    types = [e.type for e in events]
    assert types[0] is EventType.USER_INPUT
    assert EventType.TOOL_RESULT in types and EventType.FINAL_OUTPUT in types
    assert all(e.run_id == handles[3].run_id for e in events)
