"""Streaming in the agent loop and the worker's publisher, in-process: a run given a sink gets
each step's pieces between its MODEL_REQUEST and MODEL_RESPONSE events, joining to the answer;
without one the model's ``complete`` answers as before; the engine numbers pieces per step
under the lease's fence, and a failing channel never fails the run."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

from tests.support.crash import memory_backends, request_for, worker_runtime
from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.events import AgentEvent, EventType
from tether.core.items import ToolCall
from tether.errors import StreamUnavailable
from tether.models.base import DeltaSink, ModelDelta, ModelRequest
from tether.observability import metrics
from tether.persistence.deltas import InMemoryDeltaChannel, LiveDelta
from tether.runs.queue.base import submit
from tether.runtime.registry import AgentRegistry
from tether.worker.engine.cycle import drain
from tether.worker.engine.deltas import DeltaPublisher


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value-of-{key}"


def script() -> list[ModelResponse]:
    args = json.dumps({"key": "a fairly long key to be cut in pieces"})
    return [
        ModelResponse.call("call_1", "lookup", args, text="let me look that up"),
        ModelResponse.final("the value is value-of-a, as the tool said"),
    ]


class Recorder:
    """A RunDeltas that logs pieces and step ends in one list with the session's events."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def piece(self, step: int, delta: ModelDelta) -> None:
        self.log.append(("piece", (step, delta)))

    def step_done(self, step: int) -> None:
        self.log.append(("done", step))

    def event(self, event: AgentEvent) -> None:
        self.log.append(("event", event))


def test_pieces_come_between_the_request_and_the_response_and_join_to_it() -> None:
    agent = Agent(ScriptedModel(script()), tools=[lookup])
    session = agent.new_session()
    rec = Recorder()
    session.add_listener(rec.event)
    result = session.run("what is a?", on_delta=rec)
    assert result.output == "the value is value-of-a, as the tool said"
    for step, answer in enumerate(script()):
        mine = [v[1] for k, v in rec.log if k == "piece" and v[0] == step]
        positions = [i for i, (k, v) in enumerate(rec.log) if k == "piece" and v[0] == step]
        events = [(i, v) for i, (k, v) in enumerate(rec.log) if k == "event" and v.step == step]
        request_i = next(i for i, e in events if e.type is EventType.MODEL_REQUEST)
        response_i = next(i for i, e in events if e.type is EventType.MODEL_RESPONSE)
        done_i = rec.log.index(("done", step))
        assert request_i < min(positions) and max(positions) < done_i < response_i
        assert "".join(d.text for d in mine if d.kind == "text") == answer.text
        for index, call in enumerate(answer.tool_calls):
            args = [d for d in mine if d.kind == "tool_arguments" and d.call_index == index]
            assert "".join(d.text for d in args) == call.arguments
            assert (args[0].call_id, args[0].tool_name) == (call.id, call.name)


def test_a_cancel_while_the_last_step_streams_comes_too_late_and_the_run_completes() -> None:
    # a run stops at a step boundary: one that the streaming step ends has none left to reach
    session = Agent(ScriptedModel(script()), tools=[lookup]).new_session()
    rec = Recorder()
    last = len(script()) - 1
    cancelled = lambda: any(k == "piece" and v[0] == last for k, v in rec.log)  # noqa: E731
    result = session.run("what is a?", on_delta=rec, cancel_check=cancelled)
    assert cancelled() and result.status.value == "COMPLETED"
    assert result.output == script()[-1].text


class CountingModel(ScriptedModel):
    def __init__(self, responses: Sequence[ModelResponse]) -> None:
        super().__init__(responses)
        self.streamed = 0

    def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        self.streamed += 1
        return super().stream(request, on_delta)


def test_without_a_sink_the_model_completes_as_before() -> None:
    model = CountingModel(script())
    session = Agent(model, tools=[lookup]).new_session()
    assert session.run("what is a?").output == script()[1].text
    assert model.streamed == 0


class PlainModel:
    """A model that cannot stream."""

    def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse.final("plain")


def test_a_model_that_cannot_stream_completes_even_with_a_sink() -> None:
    rec = Recorder()
    result = Agent(PlainModel()).new_session().run("hi", on_delta=rec)
    assert result.output == "plain" and rec.log == []


def _engine(channel: Any, agent: Agent) -> tuple[Any, Any]:
    backends = memory_backends()
    registry = AgentRegistry({"streamer": lambda: agent})
    rt = worker_runtime(backends, "w1", registry=registry)
    rt.deltas = DeltaPublisher(channel)
    return rt, backends


def test_the_engine_numbers_pieces_per_step_under_the_fence() -> None:
    channel = InMemoryDeltaChannel()
    rt, _backends = _engine(channel, Agent(ScriptedModel(script()), tools=[lookup]))
    request = request_for("s-engine", "what is a?").model_copy(update={"agent": "streamer"})
    submit(rt.runs, request)
    assert drain(rt, request.tenant, request.session_id) == 1
    pieces = [d for _c, d in channel.read(request.tenant, request.session_id)]
    fence = rt.leases.current_fence(request.tenant, request.session_id)
    assert {d.run_id for d in pieces} == {request.run_id} and {d.fence for d in pieces} == {fence}
    for step in (0, 1):
        mine = [d for d in pieces if d.step == step]
        indexes = [d.index for d in mine]  # pieces published together share an entry
        assert indexes[0] == 0 and indexes == sorted(set(indexes))
        assert "".join(d.text for d in mine if d.kind == "text") == script()[step].text
    # nothing of them reaches the event stream
    events = rt.stream.read(request.tenant, request.session_id)
    assert not any(isinstance(e, LiveDelta) for e in events)


class BrokenChannel(InMemoryDeltaChannel):
    def publish(self, tenant: str, session_id: str, deltas: Sequence[LiveDelta]) -> None:
        raise StreamUnavailable("redis is away (test)")


def test_a_failing_channel_never_fails_the_run() -> None:
    before = metrics.DELTA_PUBLISH_FAILURES._value.get()
    rt, _backends = _engine(BrokenChannel(), Agent(ScriptedModel(script()), tools=[lookup]))
    request = request_for("s-broken", "what is a?").model_copy(update={"agent": "streamer"})
    submit(rt.runs, request)
    assert drain(rt, request.tenant, request.session_id) == 1
    view = rt.runs.get(request.ref)
    assert view is not None and view.result is not None
    assert view.result.status == "COMPLETED" and view.result.output == script()[1].text
    assert metrics.DELTA_PUBLISH_FAILURES._value.get() > before


def test_calls_of_a_parsed_response_keep_their_pieces() -> None:
    # a call id the loop normalizes (blank) still has its pieces tagged with the model's
    rec = Recorder()
    call = ToolCall(id="call_9", name="lookup", arguments='{"key": "b"}')
    model = ScriptedModel([ModelResponse.calls(call), ModelResponse.final("ok")])
    Agent(model, tools=[lookup]).new_session().run("x", on_delta=rec)
    firsts = [v[1] for k, v in rec.log if k == "piece" and v[1].call_id is not None]
    assert [(d.call_id, d.tool_name) for d in firsts] == [("call_9", "lookup")]


def test_pieces_published_together_are_joined_per_text_and_per_call() -> None:
    from tether.worker.engine.deltas import coalesce

    def d(i: int, kind: str, text: str, call: int = 0, cid: str | None = None) -> LiveDelta:
        return LiveDelta("r", 1, 0, i, kind, text, call, cid, "t" if cid else None)  # type: ignore[arg-type]

    pieces = [
        d(0, "text", "a "), d(1, "text", "b"),
        d(2, "tool_arguments", '{"x"', 0, "c1"), d(3, "tool_arguments", ": 1}", 0),
        d(4, "tool_arguments", "{}", 1, "c2"), d(5, "tool_arguments", " ", 1),
    ]  # fmt: skip
    assert coalesce(pieces) == [
        d(0, "text", "a b"),
        d(2, "tool_arguments", '{"x": 1}', 0, "c1"),
        d(4, "tool_arguments", "{} ", 1, "c2"),
    ]
    other_step = LiveDelta("r", 1, 1, 0, "text", "c")
    assert coalesce([pieces[0], other_step]) == [pieces[0], other_step]


class SplittingModel(ScriptedModel):
    """Streams its answer in 3-character pieces, so a secret always spans several."""

    def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        response = self.complete(request)
        for start in range(0, len(response.text), 3):
            on_delta(ModelDelta("text", response.text[start : start + 3]))
        for index, call in enumerate(response.tool_calls):
            for start in range(0, len(call.arguments), 3):
                first = start == 0
                on_delta(
                    ModelDelta(
                        "tool_arguments",
                        call.arguments[start : start + 3],
                        call_index=index,
                        call_id=call.id if first else None,
                        tool_name=call.name if first else None,
                    )
                )
        return response


def test_a_secret_split_across_pieces_never_reaches_the_sink() -> None:
    from tether.runtime.redaction import secret_redactor

    secret = "hunter2-very-secret"
    pasted = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1"  # caught by the default patterns
    bearer = "tok" + "en0123456789abcdef"  # only after "Bearer ", a stretch before it
    answers = [
        ModelResponse.call(
            "call_1", "lookup", json.dumps({"key": secret}), text=f"using {secret} now"
        ),
        ModelResponse.final(f"done with {secret}, and {pasted}\nbye Bearer {bearer} end"),
    ]
    agent = Agent(SplittingModel(answers), tools=[lookup], redact=secret_redactor([secret]))
    rec = Recorder()
    agent.new_session().run("go", on_delta=rec)
    pieces = [v[1] for k, v in rec.log if k == "piece"]
    published = "".join(d.text for d in pieces)
    assert secret[:8] not in published and pasted[:12] not in published
    assert bearer[:8] not in published
    texts = {
        step: "".join(
            d.text
            for s, d in (v for k, v in rec.log if k == "piece")
            if s == step and d.kind == "text"
        )
        for step in (0, 1)
    }
    assert texts == {0: "using *** now", 1: "done with ***, and ***\nbye Bearer *** end"}
    args = [d for s, d in (v for k, v in rec.log if k == "piece") if d.kind == "tool_arguments"]
    assert "".join(d.text for d in args) == json.dumps({"key": "***"})
    assert (args[0].call_id, args[0].tool_name) == ("call_1", "lookup")


class ThreadNoting(InMemoryDeltaChannel):
    """Notes which thread published each batch; a batch can be held at a gate (a slow Redis)."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def publish(self, tenant: str, session_id: str, deltas: Sequence[LiveDelta]) -> None:
        self.entered.set()
        self.gate.wait(10)
        self.threads.append(threading.current_thread().name)
        super().publish(tenant, session_id, deltas)


def _piece(index: int, text: str) -> LiveDelta:
    return LiveDelta(run_id="r-1", fence=1, step=0, index=index, kind="text", text=text)


class Threadless(DeltaPublisher):
    """A publisher whose thread never runs: always idle, as between two steps."""

    def _start(self) -> None:
        pass


def test_a_flush_with_the_thread_idle_publishes_on_the_callers_thread() -> None:
    channel = ThreadNoting()
    publisher = Threadless(channel)
    assert publisher.flush() and channel.threads == []  # nothing queued: no round trip
    for index, text in enumerate(["a ", "b ", "c"]):
        publisher.put("acme", "s-1", _piece(index, text))
    assert publisher.flush()
    assert channel.threads == [threading.current_thread().name]  # one batch, joined
    assert [d.text for _c, d in channel.read("acme", "s-1")] == ["a b c"]


def test_a_flush_while_the_thread_publishes_waits_for_it_in_order() -> None:
    channel = ThreadNoting()
    publisher = DeltaPublisher(channel)
    channel.gate.clear()  # the thread, woken by the first piece, stalls in its publish
    publisher.put("acme", "s-1", _piece(0, "a "))
    assert channel.entered.wait(5)
    publisher.put("acme", "s-1", _piece(1, "b"))  # queued behind the stalled batch
    done: list[bool] = []
    flusher = threading.Thread(target=lambda: done.append(publisher.flush()), name="flusher")
    flusher.start()
    flusher.join(0.2)
    assert flusher.is_alive() and done == []  # it does not overtake the batch in flight
    channel.gate.set()
    flusher.join(5)
    assert done == [True] and channel.threads == ["tether-deltas", "tether-deltas"]
    assert [d.text for _c, d in channel.read("acme", "s-1")] == ["a ", "b"]


PEM_BODY = ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7", "q3Xz9Lr0m1nFQkZ8pVd2Wb")


def test_a_private_key_split_across_lines_and_pieces_never_reaches_the_sink() -> None:
    """A PEM private key is the one credential pattern whose match spans whitespace: pieces
    went out at each line end, so its body lines were published before its end marker made
    it a match. It is held back whole from ``-----BEGIN`` until then."""
    key = (
        "-----BEGIN RSA PRIVATE KEY-----\n"
        + "\n".join(PEM_BODY)
        + "\n-----END RSA PRIVATE KEY-----"
    )
    answer = f"here is your key:\n{key}\nkeep it safe.\n-----BEGIN CERTIFICATE-----\nMIIB\n"
    agent = Agent(SplittingModel([ModelResponse.final(answer)]))
    rec = Recorder()
    agent.new_session().run("go", on_delta=rec)
    pieces = [v[1] for k, v in rec.log if k == "piece"]
    published = "".join(d.text for d in pieces)
    for line in PEM_BODY:
        assert line[:10] not in published
    expected = "here is your key:\n***\nkeep it safe.\n-----BEGIN CERTIFICATE-----\nMIIB\n"
    assert published == expected


def test_unfinished_key_holds_only_what_may_still_be_a_private_key() -> None:
    from tether.runtime.streaming import unfinished_key

    header = "-----BEGIN EC PRIVATE KEY-----"
    assert unfinished_key("no key here\n", 0) is None
    assert unfinished_key("a -----BEG", 0) is None  # not yet a start (the whitespace rule holds it)
    assert unfinished_key("a -----BEGIN EC PRI", 0) == 2  # the header still arriving
    assert unfinished_key(f"a {header}\nMIIB\n", 0) == 2  # no end marker yet
    done = f"a {header}\nMIIB\n-----END EC PRIVATE KEY-----\n"
    assert unfinished_key(done, 0) is None
    assert unfinished_key(done + f"b {header}\n", 0) == len(done) + 2  # a second, unfinished
    assert unfinished_key("-----BEGIN CERTIFICATE-----\nMIIB\n", 0) is None  # not a key


class EndlessStream:
    """A model that streams one short piece after another for as long as it is read (a
    runaway answer), and counts the pieces it sent."""

    model_name = "endless"

    def __init__(self, piece_s: float) -> None:
        self.piece_s = piece_s
        self.sent = 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("a run given a sink streams")

    def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        while self.sent < 2_000:  # 20 s: bounded, should the cut fail
            time.sleep(self.piece_s)
            self.sent += 1
            on_delta(ModelDelta("text", "more "))
        return ModelResponse.final("unreachable")


def test_a_model_streaming_past_the_deadline_fails_the_run_at_once_without_a_retry() -> None:
    """The run's deadline was only looked at between steps: a model that kept streaming kept
    the run alive until the worker's guardian killed its process, and the run was retried as
    a crash (the model paid three times). The stream is now cut at the deadline: the run fails
    ``RunTimeout`` in its one attempt."""
    model = EndlessStream(piece_s=0.01)
    rt, _backends = _engine(InMemoryDeltaChannel(), Agent(model))  # type: ignore[arg-type]
    request = request_for("s-endless", "go on").model_copy(
        update={"agent": "streamer", "timeout_s": 0.5}
    )
    submit(rt.runs, request)
    assert drain(rt, request.tenant, request.session_id) == 1
    view = rt.runs.get(request.ref)
    assert view is not None and view.result is not None
    assert (view.result.status, view.result.error_type) == ("FAILED", "RunTimeout")
    assert view.result.attempts == 1
    assert model.sent < 1_000  # cut near 0.5 s of pieces, not streamed to the end
