"""Signals, in-process: a tool's ``ctx.wait_for_signal`` takes a signal sent before it at once
or parks its call; a send wakes it once; signals are delivered once each, in send order per
name; a timeout is a tool result; a signal sent while the run parks is not missed; a run rolled
back gives back what it consumed; payloads are checked, limited and masked. The engine tests run
on memory backends and on redis-server + S3 over HTTP (``make_backends``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.crash import FAR_MS, TENANT, Backends, worker_runtime
from tests.support.signal_agents import await_signal, listener_agent, signal_waiter_agent
from tether import Agent, ModelResponse, ScriptedModel, SessionLogReader
from tether.core.events import now_ms
from tether.core.items import ToolCall, ToolOutput
from tether.core.results import RunStatus
from tether.errors import InputTooLarge, InvalidInput
from tether.models.base import ModelRequest
from tether.runs.contract import RunRequest
from tether.runs.queue.base import submit
from tether.runs.signals.base import signal_payload, wake_of
from tether.runs.waits.base import wake_run_id
from tether.runtime.registry import AgentRegistry
from tether.runtime.signals import CURSOR_KEY
from tether.runtime.waiting import parked_calls
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices
from tether.worker.engine.wait_reconcile import reconcile_waits
from tether.worker.engine.wakes import wake_due


def _rt(backends: Backends, worker_id: str = "w1") -> EngineServices:
    registry = AgentRegistry({"listener": listener_agent, "signal_waiter": signal_waiter_agent})
    return worker_runtime(backends, worker_id, registry=registry)


def _listen(session_id: str, text: str, n: int = 1, agent: str = "listener") -> RunRequest:
    return RunRequest(
        run_id=f"run-{session_id}-{n}",
        request_id=f"req-{session_id}-{n}",
        tenant=TENANT,
        session_id=session_id,
        agent=agent,
        input=text,
    )


def _send(backends: Backends, session_id: str, name: str, payload: Any) -> str:
    """What ``Producer.signal`` does: check, append, submit the wake of a waiting call."""
    text = signal_payload(name, payload, max_bytes=10_000, redact=True)
    sent = backends.signals.send(TENANT, session_id, name, text, sent_at_ms=now_ms())
    wake = wake_of(sent, name)
    if wake is not None:
        submit(backends.runs, wake)
    return sent.signal_id


def _result(backends: Backends, request: RunRequest) -> Any:
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None
    return view.result


def _payloads(output: str) -> list[Any]:
    return [json.loads(part)["payload"] for part in output.removeprefix("got: ").split(" | ")]


def test_a_signal_sent_before_the_wait_is_taken_at_once(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    rt = _rt(backends)
    signal_id = _send(backends, "s-before", "go", {"n": 1})
    request = _listen("s-before", "listen go 60")
    submit(backends.runs, request)
    drain(rt, TENANT, "s-before")
    result = _result(backends, request)
    assert result.status is RunStatus.COMPLETED, result
    (delivered,) = [json.loads(p) for p in result.output.removeprefix("got: ").split(" | ")]
    assert delivered["payload"] == {"n": 1} and delivered["signal_id"] == signal_id
    head = SessionLogReader(backends.store, backends.archive).read("s-before", tenant=TENANT)
    assert head is not None and head.metadata.attributes[CURSOR_KEY] == {"go": signal_id}
    again = _listen("s-before", "listen go 60", n=2)  # consumed: the next wait parks
    submit(backends.runs, again)
    drain(rt, TENANT, "s-before")
    assert _result(backends, again).status is RunStatus.WAITING
    # the consumed signal left the mailbox once a committed head counted it
    assert backends.signals.first_after(TENANT, "s-before", "go", None) is None


def test_a_signal_sent_after_the_wait_wakes_the_run_once(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    rt = _rt(backends)
    request = _listen("s-after", "listen go 60")
    submit(backends.runs, request)
    drain(rt, TENANT, "s-after")
    parked = _result(backends, request)
    assert parked.status is RunStatus.WAITING
    (pending,) = parked.pending
    assert pending.wait_for is not None and pending.wait_for.kind == "signal"
    assert pending.wait_for.name == "go"
    _send(backends, "s-after", "go", "ship it")
    drain(rt, TENANT, "s-after")
    woke = _result(
        backends,
        request.model_copy(update={"run_id": wake_run_id(TENANT, "s-after", pending.call_id)}),
    )
    assert woke.status is RunStatus.COMPLETED, woke
    assert _payloads(woke.output) == ["ship it"]
    assert backends.waits.records(TENANT, "s-after") == []
    _send(backends, "s-after", "go", "second")  # nobody waits: kept, no wake
    assert wake_due(rt, at_ms=FAR_MS) == 0
    report = SessionLogReader(backends.store, backends.archive).verify("s-after", tenant=TENANT)
    assert report.ok, report.problems


@pytest.mark.parametrize("agent", ["listener", "signal_waiter"])
def test_three_signals_are_delivered_once_each_in_send_order(
    make_backends: Callable[[], Backends], agent: str
) -> None:
    backends = make_backends()
    rt = _rt(backends)
    session_id = f"s-order-{agent}"
    _send(backends, session_id, "go", 1)
    _send(backends, session_id, "other", "not this one")
    request = _listen(session_id, "listen go 60 3", agent=agent)
    submit(backends.runs, request)
    drain(rt, TENANT, session_id)  # takes 1, parks for the second
    _send(backends, session_id, "go", 2)
    drain(rt, TENANT, session_id)  # woken with 2, parks for the third
    _send(backends, session_id, "go", 3)
    _send(backends, session_id, "go", 4)
    drain(rt, TENANT, session_id)
    head = SessionLogReader(backends.store, backends.archive).read(session_id, tenant=TENANT)
    assert head is not None
    assert head.applied[-1].status == RunStatus.COMPLETED.value
    assert _payloads(head.applied[-1].output or "") == [1, 2, 3]
    later = _listen(session_id, "listen go 60", n=2, agent=agent)
    submit(backends.runs, later)
    drain(rt, TENANT, session_id)
    assert _payloads(_result(backends, later).output) == [4]
    other = _listen(session_id, "listen other 60", n=3, agent=agent)
    submit(backends.runs, other)
    drain(rt, TENANT, session_id)
    assert _payloads(_result(backends, other).output) == ["not this one"]
    # taken at once, never parked on: the next run's start dropped them from the mailbox
    assert backends.signals.first_after(TENANT, session_id, "go", None) is None


def test_a_timeout_is_a_tool_result_not_an_error(make_backends: Callable[[], Backends]) -> None:
    backends = make_backends()
    rt = _rt(backends)
    request = _listen("s-timeout", "listen go 5")
    submit(backends.runs, request)
    drain(rt, TENANT, "s-timeout")
    (pending,) = _result(backends, request).pending
    assert pending.wait_for is not None and pending.wait_for.timeout_at_ms is not None
    assert wake_due(rt, at_ms=now_ms()) == 0  # not due yet
    assert wake_due(rt, at_ms=FAR_MS) == 1
    drain(rt, TENANT, "s-timeout")
    woke = _result(
        backends,
        request.model_copy(update={"run_id": wake_run_id(TENANT, "s-timeout", pending.call_id)}),
    )
    assert woke.status is RunStatus.COMPLETED, woke
    assert json.loads(woke.output.removeprefix("got: ")) == {"signal": "go", "timed_out": True}
    _send(backends, "s-timeout", "go", "late")  # too late for that call: kept for the next
    later = _listen("s-timeout", "listen go 5", n=2)
    submit(backends.runs, later)
    drain(rt, TENANT, "s-timeout")
    assert _payloads(_result(backends, later).output) == ["late"]


def test_a_timeout_wake_that_finds_a_signal_delivers_it(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    rt = _rt(backends)
    request = _listen("s-race", "listen go 5")
    submit(backends.runs, request)
    drain(rt, TENANT, "s-race")
    assert wake_due(rt, at_ms=FAR_MS) == 1  # the timeout's wake is queued first...
    _send(backends, "s-race", "go", "just in time")  # ...the signal's is its duplicate
    drain(rt, TENANT, "s-race")
    head = SessionLogReader(backends.store, backends.archive).read("s-race", tenant=TENANT)
    assert head is not None and _payloads(head.applied[-1].output or "") == ["just in time"]


def test_a_signal_sent_while_the_run_parks_is_not_missed(
    make_backends: Callable[[], Backends],
) -> None:
    """The sender read no wait record (the run had not parked yet): the parking worker finds
    the signal in the mailbox after it indexed the wait, and submits the wake."""
    backends = make_backends()
    rt = _rt(backends)
    request = _listen("s-race2", "listen go 60")
    submit(backends.runs, request)
    real_park = backends.waits.park

    def park_after_a_send(records: Any) -> None:
        # what a producer does between the tool's look and the wait's record: append, and
        # find no wait to wake
        if not records or backends.signals.first_after(TENANT, "s-race2", "go", None):
            return real_park(records)
        text = signal_payload("go", "raced", max_bytes=10_000, redact=False)
        sent = backends.signals.send(TENANT, "s-race2", "go", text, sent_at_ms=now_ms())
        assert wake_of(sent, "go") is None
        return real_park(records)

    backends.waits.park = park_after_a_send  # type: ignore[method-assign]
    try:
        drain(rt, TENANT, "s-race2")
    finally:
        backends.waits.park = real_park  # type: ignore[method-assign]
    assert _result(backends, request).status is RunStatus.WAITING
    drain(rt, TENANT, "s-race2")  # the wake the parking worker submitted
    head = SessionLogReader(backends.store, backends.archive).read("s-race2", tenant=TENANT)
    assert head is not None and _payloads(head.applied[-1].output or "") == ["raced"]


def test_a_signal_sent_while_redis_lost_the_wait_wakes_it_after_reconcile(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    rt = _rt(backends)
    request = _listen("s-lost", "listen go 600")
    submit(backends.runs, request)
    drain(rt, TENANT, "s-lost")
    (pending,) = _result(backends, request).pending
    backends.waits.settle(TENANT, "s-lost", [pending.call_id])  # what a flush did to it
    _send(backends, "s-lost", "go", "while lost")  # no wait record: no wake
    assert reconcile_waits(rt).rebuilt == 1  # parked again from the head, and the mailbox looked at
    drain(rt, TENANT, "s-lost")
    head = SessionLogReader(backends.store, backends.archive).read("s-lost", tenant=TENANT)
    assert head is not None and _payloads(head.applied[-1].output or "") == ["while lost"]


def test_a_run_rolled_back_gives_back_the_signal_it_took(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    rt = _rt(backends)
    _send(backends, "s-back", "go", "keep me")
    failing = _listen("s-back", "listen go 60 1 boom")
    submit(backends.runs, failing)
    drain(rt, TENANT, "s-back")
    assert _result(backends, failing).status is RunStatus.FAILED
    again = _listen("s-back", "listen go 60", n=2)
    submit(backends.runs, again)
    drain(rt, TENANT, "s-back")
    assert _payloads(_result(backends, again).output) == ["keep me"]


def _pair_agent() -> Agent:
    """One step with two calls waiting for ``go`` at once (run in parallel)."""
    args = json.dumps({"name": "go", "timeout_s": 60})

    def respond(request: ModelRequest) -> ModelResponse:
        outputs = [i.output for i in request.items if isinstance(i, ToolOutput)]
        if outputs:
            return ModelResponse.final("got: " + " | ".join(sorted(outputs)))
        calls = [ToolCall(id=f"c{n}", name="await_signal", arguments=args) for n in (1, 2)]
        return ModelResponse.calls(*calls)

    return Agent(ScriptedModel(responder=respond), "scripted", tools=[await_signal], name="pair")


def test_two_calls_of_one_step_never_take_the_same_signal(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    registry = AgentRegistry({"pair": _pair_agent})
    rt = worker_runtime(backends, "w1", registry=registry)
    _send(backends, "s-pair", "go", "a")
    _send(backends, "s-pair", "go", "b")
    request = _listen("s-pair", "both", agent="pair")
    submit(backends.runs, request)
    drain(rt, TENANT, "s-pair")
    assert sorted(_payloads(_result(backends, request).output)) == ["a", "b"]


def test_in_process_a_wait_parks_and_an_answer_goes_on() -> None:
    session = listener_agent().new_session()
    result = session.run("listen go 60")
    assert result.status is RunStatus.WAITING
    (wait,) = parked_calls(session.memory_snapshot().items).values()
    assert wait.kind == "signal" and wait.name == "go"


def test_payloads_are_checked_limited_and_masked() -> None:
    with pytest.raises(InvalidInput, match="not JSON"):
        signal_payload("go", {"x": {1, 2}}, max_bytes=1000, redact=False)
    with pytest.raises(InvalidInput, match="not JSON"):
        signal_payload("go", float("nan"), max_bytes=1000, redact=False)
    with pytest.raises(InputTooLarge, match="TETHER_MAX_INPUT_BYTES"):
        signal_payload("go", "x" * 2000, max_bytes=1000, redact=False)
    with pytest.raises(InvalidInput, match="signal name"):
        signal_payload("no spaces", 1, max_bytes=1000, redact=False)
    masked = signal_payload(
        "go", {"key": "sk-live-abcdefghijklmnopqrstuv"}, max_bytes=1000, redact=True
    )
    assert "abcdefghijklmnop" not in masked
