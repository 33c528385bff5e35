"""The session runtime core: the reference scenarios and the guarantees we add on top."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pydantic
import pytest

from tether import (
    Agent,
    AgentOptions,
    CompactResult,
    EventType,
    MemorySnapshot,
    ModelResponse,
    RunStatus,
    ScriptedModel,
    ToolOutput,
    UserMessage,
    Waiting,
    project_events,
    tool,
)
from tether.core.events import ErrorPayload, ToolResultPayload, Usage
from tether.errors import (
    ModelError,
    RunCancelled,
    RunTimeout,
    SessionNotFound,
    StoreNotConfigured,
    TokenBudgetExceeded,
)
from tether.persistence.codec import dumps_event, loads_event
from tether.persistence.stores.memory import InMemorySnapshotStore


@tool
def echo() -> str:
    """Return a fixed string."""
    return "echo-output"


class KeepLast:
    """The minimal policy of the reference test: keep the last item, set a fixed summary."""

    def should_compact(self, snapshot: MemorySnapshot) -> bool:
        return False

    def compact(self, snapshot: MemorySnapshot) -> CompactResult:
        memory = MemorySnapshot(items=snapshot.items[-1:], summary="compressed-summary")
        return CompactResult(memory=memory, summary="compressed-summary")


def reference_agent(**kwargs: object) -> Agent:
    model = ScriptedModel([ModelResponse.call("call_1", "echo"), ModelResponse.final("done")])
    return Agent(model, tools=[echo], **kwargs)  # type: ignore[arg-type]


def through_json(events: list) -> list:  # type: ignore[type-arg]
    return [loads_event(dumps_event(e)) for e in events]


def assert_contract(session) -> None:  # type: ignore[no-untyped-def]
    memory = session.memory_snapshot()
    assert project_events(session.events) == memory
    assert project_events(through_json(session.events)) == memory


def test_fold_equals_memory_after_tool_loop() -> None:
    session = reference_agent().new_session()
    result = session.run("hello")
    assert result.status is RunStatus.COMPLETED
    assert result.output == "done"
    assert [r.output for r in result.tool_results] == ["echo-output"]
    types = [e.type for e in session.events]
    assert types.count(EventType.TOOL_RESULT) == 1
    assert [e.seq for e in session.events] == list(range(1, len(types) + 1))
    assert_contract(session)
    items = session.memory_snapshot().items
    assert items[0] == UserMessage(content="hello")
    assert ToolOutput(call_id="call_1", name="echo", output="echo-output") in items


def test_fold_equals_memory_after_compact() -> None:
    session = reference_agent().new_session()
    session.run("hello")
    result = session.compact(KeepLast())
    memory = session.memory_snapshot()
    assert memory.summary == "compressed-summary"
    assert len(memory.items) == 1
    assert session.last_compact == result
    assert session.events[-1].type is EventType.MEMORY_COMPRESS
    assert_contract(session)
    assert session.snapshot().last_compact == result


def test_replace_tool_output_patches_projection() -> None:
    session = reference_agent().new_session()
    session.run("hello")
    assert session.replace_tool_output("call_1", "patched-output") is True
    assert session.replace_tool_output("no-such-call", "x") is False
    assert session.events[-1].type is EventType.TOOL_OUTPUT_REPLACED
    projected = project_events(through_json(session.events))
    outputs = [i.output for i in projected.items if isinstance(i, ToolOutput)]
    assert outputs == ["patched-output"]
    assert_contract(session)


def test_snapshot_restore_into_new_session() -> None:
    agent = reference_agent()
    source = agent.new_session()
    source.run("hello")
    snapshot = source.snapshot()
    restored = agent.session_from_snapshot(snapshot)
    assert restored.session_id == source.session_id
    assert restored.events[:-1] == source.events
    assert restored.events[-1].type is EventType.SESSION_RESTORED
    assert restored.events[-1].seq == source.last_seq + 1
    assert restored.memory_snapshot() == source.memory_snapshot()
    assert_contract(restored)
    restored.run("again")
    assert_contract(restored)
    assert restored.events[-1].seq == len(restored.events)


def test_sessions_are_isolated() -> None:
    agent = Agent(ScriptedModel(default_text="ok"))
    one, two = agent.new_session(), agent.new_session()
    assert one.session_id != two.session_id
    one.put_metadata("k", "v1")
    one.run("only in one")
    assert "k" not in two.metadata.attributes
    assert two.memory_snapshot().items == ()
    assert two.events == []


def test_snapshots_and_metadata_are_defensive_copies() -> None:
    session = reference_agent().new_session()
    session.put_metadata("tags", ["a"])
    session.run("hello")
    snap = session.snapshot()
    snap.metadata.attributes["tags"].append("mutated")  # type: ignore[union-attr]
    snap.metadata.attributes["new"] = 1
    snap.events.clear()
    snap.applied.append(snap.applied[0] if snap.applied else None)  # type: ignore[arg-type]
    meta = session.metadata
    meta.attributes["other"] = 2
    assert session.metadata.attributes == {"tags": ["a"]}
    assert len(session.events) > 0
    assert session.snapshot().applied == []
    with pytest.raises(pydantic.ValidationError):  # memory values are frozen
        session.memory_snapshot().items[0].content = "x"  # type: ignore[misc]


def test_save_and_resume_keep_identity_metadata_and_memory() -> None:
    store = InMemorySnapshotStore()
    agent = reference_agent(store=store)
    session = agent.new_session("s-1", tenant="acme")
    session.put_metadata("owner", "ann")
    session.run("hello")
    session.save()
    resumed = agent.resume_session("s-1", tenant="acme")
    assert resumed.session_id == "s-1"
    assert resumed.tenant == "acme"
    assert resumed.metadata.attributes == {"owner": "ann"}
    assert resumed.metadata.updated_at_ms == session.metadata.updated_at_ms
    assert resumed.metadata.created_at_ms == session.metadata.created_at_ms
    assert resumed.memory_snapshot() == session.memory_snapshot()
    assert_contract(resumed)


def test_resume_and_save_errors_are_clear() -> None:
    with pytest.raises(StoreNotConfigured, match="store"):
        reference_agent().resume_session("s-1")
    with pytest.raises(StoreNotConfigured, match="no snapshot store"):
        reference_agent().new_session().save()
    with pytest.raises(SessionNotFound, match="default/nope"):
        reference_agent(store=InMemorySnapshotStore()).resume_session("nope")


def test_failed_run_emits_error_before_raising() -> None:
    class Broken:
        def complete(self, request: object) -> ModelResponse:
            raise RuntimeError("upstream 503")

    session = Agent(Broken()).new_session()
    with pytest.raises(ModelError, match="upstream 503"):
        session.run("hi")
    last = session.events[-1]
    assert last.type is EventType.ERROR
    assert isinstance(last.payload, ErrorPayload)
    assert last.payload.error_type == "ModelError"
    assert_contract(session)


def test_timeout_and_cancellation_emit_error() -> None:
    slow = Agent(
        ScriptedModel([ModelResponse.call("c", "echo")] * 5),
        tools=[echo],
        options=AgentOptions(timeout_s=1e-9),
    )
    session = slow.new_session()
    with pytest.raises(RunTimeout) as timed_out:
        session.run("hi")
    # the fix names both knobs: the run's own timeout and the agent's default
    assert all(k in str(timed_out.value) for k in ("--timeout-s", "AgentOptions.timeout_s"))
    assert session.events[-1].type is EventType.ERROR
    cancelled = reference_agent().new_session()
    with pytest.raises(RunCancelled):
        cancelled.run("hi", cancel_check=lambda: True)
    assert cancelled.events[-1].type is EventType.ERROR
    assert_contract(cancelled)


def test_token_budget_stops_the_run() -> None:
    usage = Usage(input_tokens=6, output_tokens=5, total_tokens=11)
    model = ScriptedModel([ModelResponse(text="x", tool_calls=(), usage=usage)])
    session = Agent(model, options=AgentOptions(token_budget=10)).new_session()
    with pytest.raises(TokenBudgetExceeded, match="budget of 10"):
        session.run("hi")
    assert_contract(session)


def test_listener_that_raises_never_breaks_a_run() -> None:
    seen: list[EventType] = []

    def bad(event: object) -> None:
        raise ValueError("listener bug")

    agent = reference_agent(listeners=[bad, lambda e: seen.append(e.type)])
    result = agent.new_session().run("hello")
    assert result.output == "done"
    assert EventType.FINAL_OUTPUT in seen


def test_step_limit_gives_continuation_required() -> None:
    model = ScriptedModel([ModelResponse.call(f"c{i}", "echo") for i in range(5)])
    agent = Agent(model, tools=[echo], options=AgentOptions(max_steps=2))
    result = agent.new_session().run("loop")
    assert result.status is RunStatus.CONTINUATION_REQUIRED
    assert result.steps == 2


def test_invalid_and_unknown_tool_calls_become_tool_errors() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    model = ScriptedModel(
        [
            ModelResponse.call("c1", "add", '{"a": "not a number", "b": 1}'),
            ModelResponse.call("c2", "nope", "{}"),
            ModelResponse.call("c3", "add", "not json"),
            ModelResponse.call("c4", "add", {"a": 2, "b": 3}),
            ModelResponse.final("done"),
        ]
    )
    session = Agent(model, tools=[add]).new_session()
    result = session.run("go")
    outputs = [r.output for r in result.tool_results]
    assert outputs[0].startswith("TOOL_ERROR") and "InvalidArguments" in outputs[0]
    assert outputs[1].startswith("TOOL_ERROR") and "UnknownTool" in outputs[1]
    assert outputs[2].startswith("TOOL_ERROR") and "not valid JSON" in outputs[2]
    assert outputs[3] == "5"
    assert [r.ok for r in result.tool_results] == [False, False, False, True]
    assert_contract(session)


def test_raising_tool_becomes_result_the_model_sees() -> None:
    @tool
    def boom() -> str:
        """Fail."""
        raise OSError("disk on fire")

    model = ScriptedModel([ModelResponse.call("c1", "boom"), ModelResponse.final("recovered")])
    session = Agent(model, tools=[boom]).new_session()
    result = session.run("go")
    assert result.output == "recovered"
    assert "disk on fire" in result.tool_results[0].output
    second_request = model.requests[1]
    assert isinstance(second_request.items[-1], ToolOutput)
    assert "TOOL_ERROR" in second_request.items[-1].output


def test_waiting_tool_then_replace_and_continue() -> None:
    @tool
    def slow_job() -> Waiting:
        """Start a job that finishes later."""
        return Waiting(operation_id="op-1")

    model = ScriptedModel(
        [ModelResponse.call("job-1", "slow_job"), ModelResponse.final("job said: ok")]
    )
    session = Agent(model, tools=[slow_job]).new_session()
    first = session.run("start")
    assert first.status is RunStatus.WAITING
    assert session.replace_tool_output("job-1", "ok")
    second = session.run(None)
    assert second.status is RunStatus.COMPLETED
    assert isinstance(model.requests[-1].items[-1], ToolOutput)
    assert model.requests[-1].items[-1].output == "ok"
    assert_contract(session)


def test_parallel_tools_respect_cap_and_call_order() -> None:
    lock = threading.Lock()
    running = 0
    peak = 0
    release = threading.Event()

    @tool
    def work(n: int) -> str:
        """Work."""
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(0.2)  # overlap the calls so a missing cap would show
        with lock:
            running -= 1
        return f"result-{n}"

    from tether.core.items import ToolCall

    calls = [ToolCall(id=f"c{n}", name="work", arguments=f'{{"n": {n}}}') for n in range(4)]
    model = ScriptedModel([ModelResponse.calls(*calls), ModelResponse.final("done")])
    options = AgentOptions(parallel_tool_calls=True, max_parallel_tool_calls=2)
    session = Agent(model, tools=[work], options=options).new_session()
    result = session.run("go")
    assert peak == 2
    assert [r.output for r in result.tool_results] == [f"result-{n}" for n in range(4)]
    tool_events = [e for e in session.events if e.type is EventType.TOOL_RESULT]
    assert [e.payload.item.call_id for e in tool_events] == ["c0", "c1", "c2", "c3"]  # type: ignore[union-attr]


def test_tool_over_timeout_fails_while_others_complete() -> None:
    gate = threading.Event()

    @tool
    def maybe_slow(slow: bool) -> str:
        """Sleep when asked."""
        if slow:
            gate.wait(5)
        return "fast" if not slow else "slow"

    from tether.core.items import ToolCall

    calls = [
        ToolCall(id="a", name="maybe_slow", arguments='{"slow": false}'),
        ToolCall(id="b", name="maybe_slow", arguments='{"slow": true}'),
        ToolCall(id="c", name="maybe_slow", arguments='{"slow": false}'),
    ]
    model = ScriptedModel([ModelResponse.calls(*calls), ModelResponse.final("done")])
    options = AgentOptions(parallel_tool_calls=True, max_parallel_tool_calls=3, tool_timeout_s=0.2)
    session = Agent(model, tools=[maybe_slow], options=options).new_session()
    try:
        result = session.run("go")
    finally:
        gate.set()
    by_id = {r.call_id: r for r in result.tool_results}
    assert by_id["a"].output == "fast" and by_id["c"].output == "fast"
    assert not by_id["b"].ok and "tool_timeout_s" in by_id["b"].output
    failed_events = [
        e
        for e in session.events
        if isinstance(e.payload, ToolResultPayload) and e.payload.status == "FAILED"
    ]
    assert len(failed_events) == 1


def test_run_async_returns_future_and_surfaces_exceptions() -> None:
    future = reference_agent().run_async("hello")
    assert future.result(timeout=10).output == "done"

    class Broken:
        def complete(self, request: object) -> ModelResponse:
            raise RuntimeError("nope")

    with ThreadPoolExecutor(max_workers=1) as pool:
        failing = Agent(Broken()).run_async("x", executor=pool)
        assert isinstance(failing.exception(timeout=10), ModelError)


def test_one_shot_run_has_no_stored_session() -> None:
    store = InMemorySnapshotStore()
    result = reference_agent(store=store).run("hello")
    assert result.output == "done"
    assert store.list_session_ids("default") == []


def test_the_scripted_model_streams_pieces_that_add_up_to_its_answer() -> None:
    from tether.models.base import ModelDelta, ModelRequest, StreamingModelClient

    model = ScriptedModel(
        [
            ModelResponse.call("c1", "lookup", {"key": "a-long-key-value"}, text="let me see"),
            ModelResponse.final("the answer is 42"),
        ]
    )
    assert isinstance(model, StreamingModelClient)
    request = ModelRequest(model="m", items=())
    pieces: list[ModelDelta] = []
    first = model.stream(request, pieces.append)
    text = "".join(p.text for p in pieces if p.kind == "text")
    args = "".join(p.text for p in pieces if p.kind == "tool_arguments")
    assert text == "let me see" and len([p for p in pieces if p.kind == "text"]) == 3
    assert args == first.tool_calls[0].arguments and len(args) > 16
    named = [p for p in pieces if p.kind == "tool_arguments" and p.call_id is not None]
    assert [(p.call_id, p.tool_name) for p in named] == [("c1", "lookup")]
    pieces.clear()
    second = model.stream(request, pieces.append)
    assert second.text == "the answer is 42"
    assert [p.text for p in pieces] == ["the ", "answer ", "is ", "42"]
