"""Waking parked calls by hand, on a real worker (a Celery worker process), redis-server and S3
over HTTP: ``Producer.wake`` before a timer is due resumes the run once (the sweeper's wake at the
due time is the same run, dropped); ``tether wake``; a clear refusal when nothing waits; a
parent waiting on 3 children shows ``children k/N`` in ``tether status`` and the console, whose
session page shows the children as a tree that changes live as they are woken one by one, each
child linking back to its parent."""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.agents_fleet import parked_run
from tests.support.browser import browser, page
from tests.support.console import Console
from tests.support.stack import Stack, finished, unique
from tests.test_cli import ok, one_error_line, tether
from tether.core.results import RunStatus
from tether.dev.workers import WorkerFleet
from tether.errors import InvalidInput
from tether.keys import RedisKeys
from tether.producer import Producer
from tether.runs.waits.base import wake_request_id, wake_run_id
from tether.runs.waits.redis import RedisWaitIndex

QUEUE = "wakeq"
__all__ = ["browser", "page"]  # fixtures used by name


@pytest.fixture(scope="module")
def fleet_env(stack: Stack) -> dict[str, str]:
    return dict(
        stack.env,
        TETHER_AGENT_MODULES="tests.support.wait_agents,tests.support.child_agents",
        TETHER_QUEUE=QUEUE,
    )


@pytest.fixture(scope="module")
def producer(
    stack: Stack, fleet_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Producer]:
    """One worker serving the sleeping and the parent/child agents (it runs a sweeper too)."""
    fleet = WorkerFleet(
        fleet_env, tmp_path_factory.mktemp("wake"), count=1, queue=QUEUE, prefix="wk"
    )
    client = Producer(stack.settings.model_copy(update={"queue": QUEUE}))
    fleet.start()
    try:
        yield client
    finally:
        fleet.stop()
        client.close()


@pytest.fixture(scope="module")
def console(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """``tether console --actions`` of tenant default on the shared stack."""
    with Console(stack.env, tmp_path_factory.mktemp("wake-console"), "--actions") as running:
        yield running


def _waits(stack: Stack) -> RedisWaitIndex:
    return RedisWaitIndex(stack.redis.client(), RedisKeys(stack.settings.namespace))


def test_a_timer_woken_before_it_is_due_goes_on_once(stack: Stack, producer: Producer) -> None:
    sid = unique("wake")
    waiting = producer.run(sid, "nap 4", agent="sleeper", wait_s=60)
    assert waiting.status is RunStatus.WAITING, waiting
    (pending,) = waiting.pending
    assert pending.wait_for is not None and pending.wait_for.due_at_ms is not None
    (woke,) = producer.wake(sid)
    assert woke.run_id == wake_run_id("default", sid, pending.call_id)  # the sweeper's own id
    assert (woke.call_id, woke.waited_for, woke.duplicate) == (pending.call_id, "timer", False)
    try:  # a second click: the same wake (dropped), or nothing waits any more
        (again,) = producer.wake(sid)
        assert again.duplicate and again.run_id == woke.run_id
    except InvalidInput as exc:
        assert sid in str(exc)
    result = finished(producer, woke.run_id)
    assert result.status is RunStatus.COMPLETED, result
    output = json.loads((result.output or "").removeprefix("woke: "))
    assert output["woke_at"] < output["slept_until"]  # woken before it was due
    # past the due time the sweeper has nothing left to wake: one continuation, applied once
    time.sleep(max(0.0, pending.wait_for.due_at_ms / 1000 - time.time()) + 1.5)
    assert _waits(stack).records("default", sid) == []
    head = stack.reader().read(sid)
    assert head is not None
    applied = [r.request_id for r in head.applied]
    assert applied.count(wake_request_id("default", sid, pending.call_id)) == 1
    assert len(applied) == 2, applied  # the run that parked, and its one wake


def test_wake_says_what_to_do_when_nothing_waits(producer: Producer) -> None:
    sid = unique("idle")
    with pytest.raises(InvalidInput, match=rf"nothing of session '{sid}'.*tether status"):
        producer.wake(sid)
    waiting = producer.run(sid, "nap 600", agent="sleeper", wait_s=60)
    assert waiting.status is RunStatus.WAITING
    with pytest.raises(InvalidInput, match=r"no call 'call_nope'.*its parked calls: call_"):
        producer.wake(sid, "call_nope")
    producer.cancel(waiting.run_id)  # leave nothing parked behind


def test_tether_wake_wakes_a_parked_call(fleet_env: dict[str, str], producer: Producer) -> None:
    sid = unique("cliwake")
    waiting = producer.run(sid, "nap 600", agent="sleeper", wait_s=60)
    (pending,) = waiting.pending
    doc = json.loads(ok(tether(fleet_env, "wake", sid, "--call", pending.call_id, "--json")).stdout)
    (row,) = doc["woken"]
    assert doc["session"] == f"default/{sid}"
    assert row["run_id"] == wake_run_id("default", sid, pending.call_id)
    assert row["waited_for"] == "timer" and row["duplicate"] is False
    assert finished(producer, row["run_id"]).status is RunStatus.COMPLETED
    refused = tether(fleet_env, "wake", sid)
    one_error_line(refused, sid, "tether status")


class FamilyFeed:
    """The console's live tree of a session's children, read in a thread (SSE)."""

    def __init__(self, url: str) -> None:
        self.docs: queue.Queue[dict[str, Any]] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(url,), daemon=True)
        self._thread.start()

    def _read(self, url: str) -> None:
        with httpx.Client(timeout=None) as client, client.stream("GET", url) as response:
            event = ""
            for line in response.iter_lines():
                if self._stop.is_set():
                    return
                if line.startswith("event:"):
                    event = line.partition(":")[2].strip()
                elif line.startswith("data:") and event == "family":
                    self.docs.put(json.loads(line.partition(":")[2]))

    def until(
        self, wanted: Callable[[dict[str, str]], bool], timeout_s: float = 60
    ) -> dict[str, Any]:
        """The first tree whose children's statuses (by session id) are ``wanted``."""
        deadline = time.monotonic() + timeout_s
        seen: list[dict[str, str]] = []
        while time.monotonic() < deadline:
            try:
                doc = self.docs.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            statuses = {c["session_id"]: c["status"] for c in doc["children"]}
            seen.append(statuses)
            if wanted(statuses):
                return doc
        raise AssertionError(f"no tree as wanted within {timeout_s} s; trees seen: {seen}")

    def close(self) -> None:
        self._stop.set()


def _act(console: Console, path: str, **fields: str) -> str:
    found = re.search(r'data-form-key="([^"]+)"', httpx.get(console.url + "/runs", timeout=30).text)
    assert found, "a console with actions carries its form key"
    answer = httpx.post(console.url + path, data={"form_key": found.group(1), **fields}, timeout=30)
    assert answer.status_code == 303, (path, answer.status_code, answer.text)
    return httpx.URL(answer.headers["location"]).params["message"]


def test_a_parent_and_its_children_live_in_status_and_console(
    stack: Stack, fleet_env: dict[str, str], producer: Producer, console: Console
) -> None:
    sid = unique("fam")
    call_id, children, run_id = parked_run(producer, sid, "fan 3 input nap 600")
    feed = FamilyFeed(f"{console.url}/live/sessions/{sid}/family")
    try:
        sessions = [c.session_id for c in children]
        feed.until(lambda s: s == dict.fromkeys(sessions, "waiting"))
        first = sessions[0]
        assert "woken" in _act(console, f"/sessions/{first}/wake")  # the console's button
        one_done = {**dict.fromkeys(sessions, "waiting"), first: "done"}
        doc = feed.until(lambda s: s == one_done)
        assert {c["agent"] for c in doc["children"]} == {"child"}
        status = json.loads(ok(tether(fleet_env, "status", "--json")).stdout)
        mine = [w for w in status["waiting"] if w["session_id"] == sid]
        assert [w["for"] for w in mine] == ["children 1/3 (all)"], status["waiting"]
        page = httpx.get(f"{console.url}/sessions/{sid}", timeout=30).text
        assert page.count("data-child-session=") == 3 and "children 1/3 (all)" in page
        child_page = httpx.get(f"{console.url}/sessions/{first}", timeout=30).text
        assert re.search(rf'id="parent-link"><a href="/sessions/{sid}"', child_page)
        runs = httpx.get(f"{console.url}/runs", timeout=30).text
        row = runs[runs.index(f'data-run-id="{run_id}"') :]
        assert f'action="/sessions/{sid}/wake"' in row.split("</tr>")[0]
        for child in children[1:]:
            producer.wake(child.session_id)
        feed.until(lambda s: s == dict.fromkeys(sessions, "done"))
    finally:
        feed.close()
    result = finished(producer, wake_run_id("default", sid, call_id))
    assert result.status is RunStatus.COMPLETED, result
    assert '"done": 3, "total": 3' in (result.output or "")
    # the settled wait's children left the family record; the page reads them from the head
    family = RedisKeys(stack.settings.namespace).session_waits("default", sid, "family")
    assert stack.redis.client().exists(family) == 0
    page = httpx.get(f"{console.url}/sessions/{sid}", timeout=30).text
    assert page.count("data-child-session=") == 3 and page.count(">done<") >= 3, page


def test_the_page_tree_turns_live_and_a_parked_run_is_woken_from_the_runs_page(
    producer: Producer, console: Console, page: Page
) -> None:
    sid = unique("famweb")
    call_id, children, run_id = parked_run(producer, sid, "fan 2 input nap 600")
    first, second = (c.session_id for c in children)
    page.goto(f"{console.url}/sessions/{sid}")
    for child in (first, second):
        node = page.locator(f'#family-tree li[data-child-session="{child}"] > .badge')
        expect(node).to_have_text("waiting", timeout=60_000)
    producer.wake(first)
    # no reload: the page's feed turns the child that ended
    done = page.locator(f'#family-tree li[data-child-session="{first}"] > .badge')
    expect(done).to_have_text("done", timeout=60_000)
    expect(page.locator(".wait-reason")).to_have_text("children 0/2 (all)")  # as loaded
    page.goto(f"{console.url}/runs")
    row = page.locator(f'tr[data-run-id="{run_id}"]')
    expect(row.locator(".status")).to_contain_text("children 1/2 (all)")
    row.locator(f'button[data-wake="{sid}"]').click()
    expect(page.locator("#flash")).to_contain_text("(children): woken")
    page.goto(f"{console.url}/sessions/{first}")
    page.locator("#parent-link a").click()
    expect(page.locator("#session-id")).to_have_text(sid)
    result = finished(producer, wake_run_id("default", sid, call_id))
    assert result.status is RunStatus.COMPLETED, result
    assert '"timed_out": true' in (result.output or "")  # woken before its second child ended
    producer.wake(second)  # leave nothing parked behind
