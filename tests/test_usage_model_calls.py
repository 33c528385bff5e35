"""Billed model calls without a ``MODEL_RESPONSE`` count like every other, in-process, over HTTP
to the test server process (tests/support/openai_server.py): an ``LlmCompactPolicy``'s summary
call, and an answer the client cannot use (a tool call without a function name), which fails the
call with ``ModelError``. The tokens the server reported reach the run's usage, the ``MODEL_USAGE``
event (schema v4, which an older build refuses) and so the sums built on the log
(``usage_by_model``: the session's cost, and ``run_usage``: a failed run's result and the tenant
budget checks)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import SecretStr

from tests.support.openai_fixture import OpenAIServer, reply
from tether import Agent, project_events
from tether.core.events import AgentEvent, EventType, ModelUsagePayload, Usage
from tether.errors import ModelError, TokenBudgetExceeded, UnsupportedSchemaVersion
from tether.models.base import ModelDelta
from tether.models.openai import OpenAIChatModel, OpenAIResponsesModel
from tether.models.prices import usage_by_model
from tether.persistence import codec
from tether.persistence.codec import dumps_event, loads_event
from tether.producer.ops.render import event_summary
from tether.runtime.compaction import LlmCompactPolicy
from tether.runtime.llm_summary import UNAVAILABLE_PREFIX
from tether.runtime.options import AgentOptions
from tether.worker.engine.spend import run_usage

APIS = {"chat": OpenAIChatModel, "responses": OpenAIResponsesModel}
ANSWER = {"input_tokens": 1000, "output_tokens": 100}
SUMMARY = {"input_tokens": 5000, "output_tokens": 400, "cached_tokens": 1200}
UNUSABLE = {"input_tokens": 50_000, "output_tokens": 2000, "reasoning_tokens": 300}
#: A tool call without a function name: the server answers 200 (and reports its usage), the
#: client cannot use it.
NAMELESS = [("c1", "", "{}")]


def tokens(usage: dict[str, int]) -> Usage:
    """The Usage the server's report of ``usage`` reads as."""
    into, out = usage["input_tokens"], usage["output_tokens"]
    return Usage(
        input_tokens=into,
        output_tokens=out,
        total_tokens=into + out,
        cached_tokens=usage.get("cached_tokens", 0),
        reasoning_tokens=usage.get("reasoning_tokens", 0),
    )


def usage_events(events: list[AgentEvent]) -> list[ModelUsagePayload]:
    out = []
    for event in events:
        if event.type is EventType.MODEL_USAGE:
            assert isinstance(event.payload, ModelUsagePayload)
            out.append(event.payload)
    return out


def compacting_session(server: OpenAIServer, api: str) -> Any:
    model = APIS[api](server.base_url, SecretStr(server.api_key), timeout_s=10, max_retries=0)
    # the summary goes to another model than the agent's: priced (and summed) as that one
    policy = LlmCompactPolicy(model, "summary-model", max_items=2)
    agent = Agent(model, "test-model", options=AgentOptions(compact_policy=policy))
    return agent.new_session()


@pytest.mark.parametrize("api", APIS)
def test_a_compaction_summary_call_counts_in_the_run_and_the_log(
    openai_server: OpenAIServer, api: str
) -> None:
    session = compacting_session(openai_server, api)
    summary = json.dumps({"goal": "g", "completed": ["a"]})
    # runs 1 and 2: one call each; run 3 compacts first (one summary call), then answers
    openai_server.script(
        [
            reply("first answer", usage=ANSWER),
            reply("second answer", usage=ANSWER),
            reply(summary, usage=SUMMARY),
            reply("third answer", usage=ANSWER),
        ]
    )
    runs = [session.run(text) for text in ("hello", "and again", "once more")]

    asked = [r.body["model"] for r in openai_server.model_requests()]
    assert asked == ["test-model", "test-model", "summary-model", "test-model"]
    assert [r.usage for r in runs] == [
        tokens(ANSWER),
        tokens(ANSWER),
        tokens(ANSWER) + tokens(SUMMARY),
    ]
    reported = 3 * [tokens(ANSWER)] + [tokens(SUMMARY)]  # every call the server billed
    assert sum((r.usage for r in runs), Usage()) == sum(reported, Usage())
    (recorded,) = usage_events(session.events)
    assert recorded == ModelUsagePayload(
        model="summary-model", usage=tokens(SUMMARY), call="compaction"
    )
    by_model = usage_by_model(session.events)  # what the console prices a session with
    assert by_model == {
        "test-model": tokens(ANSWER) + tokens(ANSWER) + tokens(ANSWER),
        "summary-model": tokens(SUMMARY),
    }
    third = runs[2]
    assert run_usage(session, third.first_seq) == third.usage  # a failed run's result, budgets
    # the usage is recorded before the compaction it paid for, in the run; memory is untouched
    kinds = [e.type for e in session.events if e.seq >= third.first_seq]
    assert kinds.index(EventType.MODEL_USAGE) + 1 == kinds.index(EventType.MEMORY_COMPRESS)
    assert project_events(session.events) == session.memory_snapshot()
    assert session.memory_snapshot().summary.startswith("## Goal\ng")


def test_a_summary_answer_the_client_cannot_use_still_counts(openai_server: OpenAIServer) -> None:
    session = compacting_session(openai_server, "chat")
    openai_server.script(
        [
            reply("first answer", usage=ANSWER),
            reply("second answer", usage=ANSWER),
            reply(None, NAMELESS, usage=UNUSABLE),  # the summary call: a 200 it cannot read
            reply("third answer", usage=ANSWER),
        ]
    )
    runs = [session.run(text) for text in ("hello", "and again", "once more")]

    assert runs[2].output == "third answer"  # the compaction degraded to a note
    assert session.memory_snapshot().summary.startswith(UNAVAILABLE_PREFIX)
    assert runs[2].usage == tokens(ANSWER) + tokens(UNUSABLE)
    assert usage_events(session.events) == [
        ModelUsagePayload(model="summary-model", usage=tokens(UNUSABLE), call="compaction")
    ]


def test_a_compaction_outside_a_run_records_its_summary_call(openai_server: OpenAIServer) -> None:
    """``session.compact(policy)`` (an application's, or an operator's): the summary call is
    recorded as a ``MODEL_USAGE`` event of no run, before the ``MEMORY_COMPRESS`` it paid for."""
    session = compacting_session(openai_server, "chat")
    openai_server.script([reply("first", usage=ANSWER), reply("second", usage=ANSWER)])
    session.run("hello")
    session.run("and again")  # the next run would compact: four items over max_items=2
    policy = session.agent.options.compact_policy
    openai_server.script([reply(json.dumps({"goal": "g"}), usage=SUMMARY)])

    session.compact(policy)

    (recorded,) = usage_events(session.events)
    assert recorded == ModelUsagePayload(
        model="summary-model", usage=tokens(SUMMARY), call="compaction"
    )
    last = [(e.type, e.run_id) for e in session.events[-2:]]
    assert last == [(EventType.MODEL_USAGE, None), (EventType.MEMORY_COMPRESS, None)]
    shown = event_summary(session.events[-2])  # what `tether tail` and `sessions events` print
    assert shown == "summary-model (compaction) tokens in=5000 out=400"
    assert usage_by_model(session.events)["summary-model"] == tokens(SUMMARY)
    assert project_events(session.events) == session.memory_snapshot()


def test_a_summary_call_counts_against_the_runs_token_budget(openai_server: OpenAIServer) -> None:
    model = OpenAIChatModel(openai_server.base_url, openai_server.api_key, max_retries=0)
    policy = LlmCompactPolicy(model, "test-model", max_items=2)
    options = AgentOptions(compact_policy=policy, token_budget=5000)
    agent = Agent(model, "test-model", options=options)
    session = agent.new_session()
    summary = json.dumps({"goal": "g"})
    openai_server.script(
        [reply("one", usage=ANSWER), reply("two", usage=ANSWER), reply(summary, usage=SUMMARY)]
    )
    session.run("hello")
    session.run("and again")
    with pytest.raises(TokenBudgetExceeded, match="used 5400 tokens, over its budget of 5000"):
        session.run("once more")  # the summary call alone crosses it
    assert len(openai_server.model_requests()) == 3  # stopped before paying for the step


class Pieces:
    """A RunDeltas that keeps the streamed pieces."""

    def __init__(self) -> None:
        self.pieces: list[ModelDelta] = []

    def piece(self, step: int, delta: ModelDelta) -> None:
        self.pieces.append(delta)

    def step_done(self, step: int) -> None:
        pass


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("api", APIS)
def test_an_answer_the_client_cannot_use_fails_the_run_but_its_tokens_count(
    openai_server: OpenAIServer, api: str, streamed: bool
) -> None:
    model = APIS[api](openai_server.base_url, openai_server.api_key, max_retries=0)
    session = Agent(model, "test-model").new_session()
    openai_server.script([reply("first answer", usage=ANSWER)])
    session.run("hello")
    first_seq = session.last_seq + 1
    openai_server.script([reply(None, NAMELESS, usage=UNUSABLE)])

    with pytest.raises(ModelError, match=r"no (function )?name") as failed:
        session.run("and now?", on_delta=Pieces() if streamed else None)

    assert getattr(failed.value, "usage", None) == tokens(UNUSABLE)  # on the error itself
    (request,) = openai_server.model_requests()[1:]
    assert (request.status, request.body.get("stream", False)) == (200, streamed)
    mine = [e for e in session.events if e.seq >= first_seq]
    assert not any(e.type is EventType.MODEL_RESPONSE for e in mine)
    assert usage_events(mine) == [
        ModelUsagePayload(model="test-model", usage=tokens(UNUSABLE), call="unusable_answer")
    ]
    assert [e.type for e in mine][-2:] == [EventType.MODEL_USAGE, EventType.ERROR]
    # what the worker records for a failed run, and checks the tenant's budget with
    assert run_usage(session, first_seq) == tokens(UNUSABLE)
    assert usage_by_model(session.events) == {"test-model": tokens(ANSWER) + tokens(UNUSABLE)}


def test_the_usage_event_is_schema_v4_and_an_older_build_refuses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    payload = ModelUsagePayload(model="m", usage=tokens(ANSWER), call="compaction")
    event = AgentEvent(type=EventType.MODEL_USAGE, payload=payload)
    assert json.loads(dumps_event(event))["v"] == 4
    assert loads_event(dumps_event(event)) == event
    with pytest.raises(ValueError, match="needs event schema v4"):
        AgentEvent(v=3, type=EventType.MODEL_USAGE, payload=payload)
    with monkeypatch.context() as older_build:  # a build before v4 says to upgrade
        older_build.setattr(codec, "SUPPORTED_EVENT_VERSIONS", (1, 2, 3))
        with pytest.raises(UnsupportedSchemaVersion, match="Upgrade Tether"):
            loads_event(dumps_event(event))
