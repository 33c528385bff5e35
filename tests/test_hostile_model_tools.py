"""Hostile text from a model or a tool becomes data the run can store, never a crashed run.

- A lone surrogate (a JSON ``"\\ud800"`` without its pair) in the model's text, its tool calls'
  ids, names and arguments, a tool's output or a tool's error is stored as U+FFFD: before, the
  events could not be encoded, and the commit failed on every attempt (the tool ran 3 times,
  the model was paid 3 times) until the run ended ``RetriesExhausted``.
- Tool-call arguments nested past the parser's recursion limit are an ``InvalidArguments``
  tool error, like any other bad JSON (before: a raw ``RecursionError`` failed the run).
- A tool result ``json.dumps`` cannot encode (tuple keys, a huge int, a cycle) is an
  ``UnserializableResult`` tool error (before: it failed the run).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.crash import memory_backends, request_for, worker_runtime
from tether import Agent, AgentOptions, ModelResponse, ScriptedModel, tool
from tether.core.events import AgentEvent, EventType, ModelResponsePayload, ToolResultPayload
from tether.core.items import ToolCall
from tether.core.text import valid_strings, valid_text
from tether.errors import ModelError
from tether.models.base import DeltaSink, ModelDelta, ModelRequest
from tether.persistence.codec import dumps_event, loads_event
from tether.runs.queue.base import submit
from tether.runtime.compaction import LlmCompactPolicy
from tether.runtime.registry import AgentRegistry
from tether.runtime.tools import Tool
from tether.worker.engine.cycle import drain

LONE = "\ud800"
BAD_TEXT = f"bad {LONE} text"
CLEAN_TEXT = "bad \ufffd text"


def _stored(events: list[AgentEvent]) -> list[AgentEvent]:
    """``events`` as storage would read them back (each must encode)."""
    return [loads_event(dumps_event(e)) for e in events]


# --- the helper -----------------------------------------------------------------------------


def test_valid_text_replaces_each_lone_surrogate_and_keeps_everything_else() -> None:
    assert valid_text(f"a{LONE}b\udc00") == "a\ufffdb\ufffd"
    # a pair of surrogate code points joins into the character it spells
    assert valid_text("\ud83d\ude00") == "\U0001f600"
    for clean in ("plain", "é ü 😀 中文", ""):
        assert valid_text(clean) is clean


def test_valid_strings_copies_only_what_holds_a_lone_surrogate() -> None:
    clean = ModelResponse.call("c1", "echo", {"x": "é"}, text="fine")
    assert valid_strings(clean) is clean
    dirty = ModelResponse.calls(ToolCall(id=f"c{LONE}", name="echo", arguments="{}"), text=LONE)
    fixed = valid_strings(dirty)
    assert fixed.text == "\ufffd" and fixed.tool_calls[0].id == "c\ufffd"
    assert valid_strings({f"k{LONE}": (LONE, 1)}) == {"k\ufffd": ("\ufffd", 1)}


# --- D1: lone surrogates in a run, in-process -----------------------------------------------

calls_made: list[str] = []


@tool
def echo(x: str = "") -> str:
    """Echo ``x`` back, with a lone surrogate of its own."""
    calls_made.append(x)
    return f"{x}|{BAD_TEXT}"


@tool
def fails() -> str:
    """Fail with a lone surrogate in the message."""
    raise RuntimeError(BAD_TEXT)


def _hostile_script() -> list[ModelResponse]:
    args = json.dumps({"x": LONE}, ensure_ascii=False)  # the raw character, not an escape
    return [
        ModelResponse.calls(
            ToolCall(id=f"call{LONE}", name="echo", arguments=args),
            ToolCall(id="call_2", name=f"ec{LONE}ho", arguments="{}"),
            ToolCall(id="call_3", name="fails", arguments="{}"),
            text=BAD_TEXT,
        ),
        ModelResponse.final(BAD_TEXT),
    ]


def test_lone_surrogates_from_the_model_and_the_tools_are_stored_as_replacement_chars() -> None:
    session = Agent(ScriptedModel(_hostile_script()), tools=[echo, fails]).new_session()
    result = session.run("go")
    assert result.status == "COMPLETED" and result.output == CLEAN_TEXT
    events = _stored(session.events)  # before the fix: PydanticSerializationError here
    responses = [e.payload for e in events if isinstance(e.payload, ModelResponsePayload)]
    assert responses[0].text == CLEAN_TEXT
    assert [c.id for c in responses[0].tool_calls] == ["call\ufffd", "call_2", "call_3"]
    assert responses[0].tool_calls[1].name == "ec\ufffdho"
    assert json.loads(responses[0].tool_calls[0].arguments) == {"x": "\ufffd"}
    results = [e.payload for e in events if isinstance(e.payload, ToolResultPayload)]
    by_call = {r.item.call_id: r for r in results}
    assert by_call["call\ufffd"].item.output == f"\ufffd|{CLEAN_TEXT}"
    assert "UnknownTool" in by_call["call_2"].item.output
    assert by_call["call_3"].error == CLEAN_TEXT
    final = [e for e in events if e.type is EventType.FINAL_OUTPUT]
    assert final[0].payload.text == CLEAN_TEXT  # type: ignore[union-attr]
    assert all(LONE not in dumps_event(e) for e in session.events)


class StreamingHostile(ScriptedModel):
    """Streams its answer in one piece per field, lone surrogates and all."""

    def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        response = self.complete(request)
        on_delta(ModelDelta("text", response.text or ""))
        return response


class Pieces:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def piece(self, step: int, delta: ModelDelta) -> None:
        self.texts.append(delta.text)

    def step_done(self, step: int) -> None:
        pass


def test_streamed_pieces_carry_no_lone_surrogate_either() -> None:
    pieces = Pieces()
    model = StreamingHostile([ModelResponse.final(BAD_TEXT)])
    Agent(model).new_session().run("go", on_delta=pieces)
    assert "".join(pieces.texts) == CLEAN_TEXT  # the redactor may cut it at whitespace


def test_an_approved_tool_s_lone_surrogate_is_stored_as_a_replacement_char() -> None:
    options = AgentOptions(require_approval=frozenset({"echo"}))
    model = ScriptedModel([ModelResponse.call("c1", "echo", {}), ModelResponse.final("ok")])
    session = Agent(model, tools=[echo], options=options).new_session()
    waiting = session.run("go")
    session.approve(waiting.pending[0].call_id)
    replaced = [e for e in _stored(session.events) if e.type is EventType.TOOL_OUTPUT_REPLACED]
    assert replaced[0].payload.output == f"|{CLEAN_TEXT}"  # type: ignore[union-attr]


class Broken:
    """A model whose failure quotes a lone surrogate (as a provider's error body may)."""

    def complete(self, request: ModelRequest) -> ModelResponse:
        raise RuntimeError(BAD_TEXT)


def test_an_error_quoting_a_lone_surrogate_is_stored_as_a_replacement_char() -> None:
    session = Agent(Broken()).new_session()
    with pytest.raises(ModelError):
        session.run("go")
    errors = [e.payload for e in _stored(session.events) if e.type is EventType.ERROR]
    assert CLEAN_TEXT in errors[0].message  # type: ignore[union-attr]


def test_an_llm_summary_with_a_lone_surrogate_is_stored_as_a_replacement_char() -> None:
    session = Agent(ScriptedModel([ModelResponse.final("a")])).new_session()
    session.run("one")
    answer = json.dumps({"goal": f"goal {LONE}"}, ensure_ascii=False)
    policy = LlmCompactPolicy(ScriptedModel(default_text=answer), "m", max_items=0)
    summary = session.compact(policy).summary
    assert summary is not None and "goal \ufffd" in summary
    _stored(session.events)


# --- D1 on the commit path: one attempt, the text stored with U+FFFD ------------------------


def test_a_worker_commits_a_run_with_lone_surrogates_in_one_attempt() -> None:
    calls_made.clear()
    backends = memory_backends()

    def hostile() -> Agent:
        return Agent(ScriptedModel(_hostile_script()), tools=[echo, fails])

    rt = worker_runtime(backends, "w1", registry=AgentRegistry({"hostile": hostile}))
    request = request_for("s-surrogate", "go").model_copy(update={"agent": "hostile"})
    submit(rt.runs, request)
    drain(rt, request.tenant, request.session_id)
    view = rt.runs.get(request.ref)
    assert view is not None and view.result is not None
    assert view.result.status == "COMPLETED", view.result.error_message
    assert view.result.attempts == 1
    assert view.result.output == CLEAN_TEXT
    assert len(calls_made) == 1  # the tool's side effect ran once, not once per attempt
    stored = rt.stream.read(request.tenant, request.session_id)
    outputs = [e.payload.item.output for e in stored if isinstance(e.payload, ToolResultPayload)]
    assert f"\ufffd|{CLEAN_TEXT}" in outputs


# --- D2: arguments nested past the parser's limit --------------------------------------------


@pytest.mark.parametrize(
    "nested",
    ["[" * 100_000 + "]" * 100_000, '{"x":' * 100_000 + "1" + "}" * 100_000],
    ids=["arrays", "objects"],
)
def test_deeply_nested_arguments_are_an_invalid_arguments_tool_error(nested: str) -> None:
    model = ScriptedModel([ModelResponse.call("c1", "echo", nested), ModelResponse.final("ok")])
    result = Agent(model, tools=[echo]).new_session().run("go")
    assert result.status == "COMPLETED"
    (record,) = result.tool_results
    assert record.status == "FAILED"
    assert '"errorType": "InvalidArguments"' in record.output
    assert "nested too deeply" in record.output


def test_deeply_nested_json_in_a_read_call_or_a_summary_does_not_break_compaction() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    read = ModelResponse.call("c1", "read", deep)  # compaction looks for the path it read
    session = Agent(ScriptedModel([read, ModelResponse.final("a")])).new_session()
    session.run("one")
    policy = LlmCompactPolicy(ScriptedModel(default_text="{" + deep + "}"), "m", max_items=0)
    result = session.compact(policy)  # before: RecursionError
    assert result.summary is not None and result.summary.startswith(
        "{[[["
    )  # unparsable: the model's own text stands


# --- D3: a result json.dumps cannot encode ---------------------------------------------------


def _cycle() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(
    ("value", "type_name"),
    [({(1, 2): "v"}, "dict"), (10**5000, "int"), (_cycle(), "list")],
    ids=["tuple-keys", "huge-int", "cycle"],
)
@pytest.mark.parametrize("isolated", [False, True])
def test_a_result_json_cannot_encode_is_an_unserializable_result_tool_error(
    value: object, type_name: str, isolated: bool
) -> None:
    returns = Tool(lambda: value, name="returns", description="x", isolated=isolated)
    model = ScriptedModel([ModelResponse.call("c1", "returns", {}), ModelResponse.final("ok")])
    result = Agent(model, tools=[returns]).new_session().run("go")
    assert result.status == "COMPLETED"
    (record,) = result.tool_results
    assert record.status == "FAILED"
    body = json.loads(record.output.removeprefix("TOOL_ERROR: "))
    assert body["errorType"] == "UnserializableResult"
    assert f"of type {type_name}" in body["error"] and "JSON-able data" in body["error"]


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this message cannot be read")


@tool
def breaks_badly() -> str:
    """Raise an exception whose message cannot be read."""
    raise Unprintable()


def test_a_tool_error_whose_message_cannot_be_read_is_still_a_tool_error() -> None:
    model = ScriptedModel(
        [ModelResponse.call("c1", "breaks_badly", "{}"), ModelResponse.final("ok")]
    )
    result = Agent(model, tools=[breaks_badly]).new_session().run("go")
    assert result.status == "COMPLETED"
    (record,) = result.tool_results
    assert record.status == "FAILED" and "could not be read" in record.output
