"""Child runs on real workers (2 Celery worker processes), redis-server and S3 over HTTP: a parent
fans out children and goes on with their results (all, any, a failed child), nests them as deep
as TETHER_MAX_CHILD_DEPTH lets it, cancels them with itself, and a worker SIGKILLed while it
spawns, or while a child completes (also one that slept on a timer), still runs each child once
and resumes the parent once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents_fleet import AgentsFleet, parked_run
from tests.support.crash_agents import session_for, wake_session_for
from tests.support.stack import Stack, finished, unique
from tests.test_cli import ok, tether
from tether.core.results import RunStatus
from tether.core.waits import ChildRef
from tether.keys import RedisKeys
from tether.producer import Producer
from tether.runs.queue.base import CancelOutcome
from tether.runs.waits.base import wake_request_id, wake_run_id
from tether.runs.waits.redis import RedisWaitIndex

#: How long a child's or a wake's result may take (a parent's family, on the shared fleet).
RESULT_TIMEOUT_S = 90


@pytest.fixture(scope="module")
def crash_dir(agents_fleet: AgentsFleet) -> Path:
    return agents_fleet.crash_dir


@pytest.fixture(scope="module")
def producer(stack: Stack, agents_fleet: AgentsFleet) -> Iterator[Producer]:
    """A producer on the shared fleet (two workers) serving the parent, child and crash agents."""
    with agents_fleet.producer(stack) as client:
        yield client


def parked(producer: Producer, sid: str, text: str) -> tuple[str, tuple[ChildRef, ...]]:
    call_id, children, _ = parked_run(producer, sid, text)
    return call_id, children


def resumed(producer: Producer, sid: str, call_id: str) -> dict[str, Any]:
    done = finished(producer, wake_run_id("default", sid, call_id), timeout_s=RESULT_TIMEOUT_S)
    assert done.status is RunStatus.COMPLETED, done
    assert done.output is not None and done.output.startswith("children: "), done.output
    body: dict[str, Any] = json.loads(done.output.removeprefix("children: "))
    return body


def check_once(stack: Stack, sid: str, call_id: str, children: tuple[ChildRef, ...]) -> None:
    """Each child applied once, the parent's wake once, every log verifies."""
    reader = stack.reader()
    for child in children:
        head = reader.read(child.session_id)
        assert head is not None
        request_id = child.run_id.removeprefix("run-")
        assert [r.request_id for r in head.applied].count(request_id) == 1
        assert reader.verify(child.session_id).ok
    head = reader.read(sid)
    assert head is not None
    wake_id = wake_request_id("default", sid, call_id)
    assert [r.request_id for r in head.applied].count(wake_id) == 1
    report = reader.verify(sid)
    assert report.ok, report.problems
    waits = RedisWaitIndex(stack.redis.client(), RedisKeys(stack.settings.namespace))
    assert waits.records("default", sid) == []


def test_a_parent_fans_out_three_children_and_goes_on_with_all_their_answers(
    stack: Stack, producer: Producer
) -> None:
    sid = unique("fan")
    call_id, children = parked(producer, sid, "fan 3")
    body = resumed(producer, sid, call_id)
    assert [c["output"] for c in body["children"]] == [f"answer: topic-{i}" for i in range(3)]
    check_once(stack, sid, call_id, children)
    listed = producer.record(children[0].run_id)
    assert listed is not None and listed.request is not None
    assert listed.request.parent is not None and listed.request.parent.session_id == sid
    listing = json.loads(ok(tether(stack.env, "sessions", "list", "--parents", "--json")).stdout)
    for child in children:
        assert listing["parents"][child.session_id]["session_id"] == sid
    assert sid not in listing["parents"]


def test_mode_any_goes_on_at_the_first_child(stack: Stack, producer: Producer) -> None:
    sid = unique("fan-any")
    call_id, children = parked(producer, sid, "fan 3 any")
    body = resumed(producer, sid, call_id)
    assert body["mode"] == "any" and body["done"] >= 1
    for child in children:  # the others end too, and wake nothing more
        finished(producer, child.run_id, timeout_s=RESULT_TIMEOUT_S)
    head = stack.reader().read(sid)
    assert head is not None
    wake_id = wake_request_id("default", sid, call_id)
    assert [r.request_id for r in head.applied].count(wake_id) == 1


def test_a_failed_child_is_a_result_the_parent_reads(stack: Stack, producer: Producer) -> None:
    sid = unique("fan-fail")
    call_id, children = parked(producer, sid, "fan 2 input fail please")
    body = resumed(producer, sid, call_id)
    assert [c["status"] for c in body["children"]] == ["FAILED", "FAILED"]
    assert "told to fail" in body["children"][0]["error"]["message"]
    check_once(stack, sid, call_id, children)


def test_children_nest_as_deep_as_the_limit_and_no_deeper(stack: Stack, producer: Producer) -> None:
    sid = unique("fan-deep")
    text = "fan 1 agent parent input fan 1 agent parent input fan 1"
    call_id, _ = parked(producer, sid, text)
    body = resumed(producer, sid, call_id)  # depth 1 and 2 waited; depth 3 was refused
    (child,) = body["children"]
    assert child["status"] == "COMPLETED"
    assert "TETHER_MAX_CHILD_DEPTH" in child["output"]


def test_cancelling_the_parent_cancels_its_children(stack: Stack, producer: Producer) -> None:
    sid = unique("fan-cancel")
    call_id, children, run_id = parked_run(producer, sid, "fan 2 input nap 600")
    for child in children:  # both asleep on their own timers
        assert (
            finished(producer, child.run_id, timeout_s=RESULT_TIMEOUT_S).status is RunStatus.WAITING
        )
    assert producer.cancel(run_id) is CancelOutcome.REQUESTED
    cancelled = finished(producer, wake_run_id("default", sid, call_id), timeout_s=RESULT_TIMEOUT_S)
    assert cancelled.status is RunStatus.CANCELLED, cancelled
    for child in children:
        (pending,) = finished(producer, child.run_id, timeout_s=RESULT_TIMEOUT_S).pending
        ended = finished(
            producer,
            wake_run_id("default", child.session_id, pending.call_id),
            timeout_s=RESULT_TIMEOUT_S,
        )
        assert ended.status is RunStatus.CANCELLED, ended


def test_a_worker_killed_while_it_spawns_runs_each_child_once(
    stack: Stack, producer: Producer, crash_dir: Path
) -> None:
    sid = session_for("stream_flush", "before", unique("k"))  # the tool spawned; nothing saved
    call_id, children = parked(producer, sid, "fan 3")
    assert (crash_dir / sid).exists()
    resumed(producer, sid, call_id)
    check_once(stack, sid, call_id, children)


def test_a_worker_killed_while_a_child_completes_resumes_the_parent_once(
    stack: Stack, producer: Producer, crash_dir: Path
) -> None:
    sid = unique("fan-kill-child")
    child_sid = session_for("children", "after", unique("k"))  # told the parent; not finished
    call_id, children = parked(producer, sid, f"fan 1 session {child_sid}")
    body = resumed(producer, sid, call_id)
    assert (crash_dir / child_sid).exists()
    assert body["children"][0]["output"] == "answer: topic-0"
    check_once(stack, sid, call_id, children)


def test_a_worker_killed_while_a_sleeping_child_completes_resumes_the_parent_once(
    stack: Stack, producer: Producer, crash_dir: Path
) -> None:
    """The child ends in the wake of its timer (a continuation whose request names no parent:
    the child's head does); its worker dies before it tells the parent, and the redone commit
    tells it once."""
    sid = unique("fan-kill-nap")
    child_sid = wake_session_for("children", "before", unique("k"))
    call_id, children = parked(producer, sid, f"fan 1 session {child_sid} input nap 1")
    body = resumed(producer, sid, call_id)
    assert (crash_dir / child_sid).exists()
    assert body["children"][0]["output"].startswith("woke: ")
    check_once(stack, sid, call_id, children)
