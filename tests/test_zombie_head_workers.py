"""#18 hole 2 with real worker processes: a worker SIGSTOPped right before its head PUT.

Its pool child stops past its last lease check (tests/support/freeze_agents.py); the lease
expires; the sweeper hands the run to the other worker, which runs it again and streams its own
attempt, then waits at its own head PUT until the test has thawed the zombie (SIGCONT) and seen its
PUT happen or fail. Afterwards the head holds one attempt, the live stream shows exactly the
committed events, the handle says what the head says, and `verify` passes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from tests.support.stack import Stack, eventually, unique
from tether.dev.workers import WorkerFleet
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.persistence.streams.redis import RedisEventStream
from tether.producer import Producer

QUEUE = "freezeq"


def test_sigstop_before_head_put_keeps_head_stream_and_handle_one_attempt(
    live_stack: Stack, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    env = dict(
        live_stack.env,
        TETHER_AGENT_MODULES="tests.support.freeze_agents",
        FREEZE_TEST_DIR=str(marks),
        TETHER_QUEUE=QUEUE,
    )
    sid = f"freeze-{unique('z')}"
    producer = Producer(live_stack.settings.model_copy(update={"queue": QUEUE}))
    fleet = WorkerFleet(env, tmp_path, count=2, queue=QUEUE, prefix="freeze")
    zombie_pid: int | None = None
    try:
        fleet.start()
        assert producer.run(sid, "1+1", agent="calculator", timeout_s=120).output == "2"
        (marks / f"{sid}.arm").touch()  # from now on: freeze the first head PUT of the session
        started = time.monotonic()
        handle = producer.run_async(sid, "6*7", agent="calculator")
        frozen = marks / f"{sid}.frozen"
        zombie_pid = int(eventually(lambda: frozen.exists() and frozen.read_text(), 60))
        taker = marks / f"{sid}.taker"
        eventually(taker.exists, 90)  # lease expired, the other worker ran it and is at its PUT
        logs_before = _logs(fleet)
        os.kill(zombie_pid, signal.SIGCONT)
        # the zombie's PUT happens now: wait until its worker logged the refused attempt
        eventually(
            lambda: (
                _logs(fleet).count("aborted, will retry") > logs_before.count("aborted, will retry")
            ),
            60,
        )
        (marks / f"{sid}.go").touch()
        result = handle.result(timeout=120)
        print(f"zombie scenario resolved in {time.monotonic() - started:.1f} s")
    finally:
        if zombie_pid is not None:
            _cont(zombie_pid)
        fleet.stop()
        producer.close()
    assert result.status == "COMPLETED" and result.output == "42", result
    reader = live_stack.reader()
    head = reader.read(sid)
    assert head is not None
    assert [r.request_id for r in head.applied].count(handle.request_id) == 1
    record = head.find_applied(handle.request_id or "")
    assert record is not None and record.output == result.output
    report = reader.verify(sid)
    assert report.ok, report.problems
    stream = RedisEventStream(
        redis_from_url(live_stack.settings.redis_url), keys=RedisKeys(live_stack.settings.namespace)
    )
    live = {e.seq: e for e in stream.read("default", sid)}
    for event in reader.events(sid):
        assert live[event.seq] == event, event.seq  # the stream shows the committed attempt


def _logs(fleet: WorkerFleet) -> str:
    return "".join(w.log_path.read_text(errors="replace") for w in fleet.workers)


def _cont(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
