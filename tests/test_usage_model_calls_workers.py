"""Billed model calls without a ``MODEL_RESPONSE`` on a real worker process, its model the SDK
client pointed at the test server process (tests/support/openai_server.py): the run result's
usage holds the tokens of an ``LlmCompactPolicy``'s summary call (a completed run) and of an
answer the client could not use (a failed run), each as the server reported them."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support.chaos_stack import ChaosStack
from tests.support.compacting_agents import SUMMARY_MODEL
from tests.support.openai_fixture import OpenAIServer, reply
from tests.support.stack import unique
from tests.test_usage_model_calls import ANSWER, NAMELESS, SUMMARY, UNUSABLE, tokens
from tether.core.events import EventType, ModelUsagePayload
from tether.core.results import RunStatus
from tether.producer.client import Producer

pytest_plugins = ["tests.support.chaos_fixtures"]  # the chaos_stack and chaos fixtures

QUEUE = "compacting"


@pytest.fixture
def compacting_worker(chaos: ChaosStack, openai_server: OpenAIServer) -> Iterator[Producer]:
    """A worker on its own queue whose ``compacting`` agent talks to the test server (Chat
    Completions), and a producer for it."""
    settings = {
        "TETHER_AGENT_MODULES": "tests.support.compacting_agents",
        "TETHER_OPENAI_BASE_URL": openai_server.base_url,
        "TETHER_OPENAI_API_KEY": openai_server.api_key,
        "TETHER_OPENAI_MODEL": "test-model",
        "TETHER_OPENAI_API": "chat",
        "TETHER_OPENAI_TIMEOUT_S": "10",
        "TETHER_OPENAI_MAX_RETRIES": "0",
    }
    with chaos.queue_worker(QUEUE, settings) as producer:
        yield producer


def test_a_workers_run_result_counts_the_summary_call_and_an_unusable_answer(
    chaos: ChaosStack, openai_server: OpenAIServer, compacting_worker: Producer
) -> None:
    sid = unique("compacting")
    summary = json.dumps({"goal": "g", "completed": ["a"]})
    openai_server.script(
        [
            reply("first answer", usage=ANSWER),
            reply("second answer", usage=ANSWER),
            reply(summary, usage=SUMMARY),  # run 3 compacts first
            reply("third answer", usage=ANSWER),
            reply(None, NAMELESS, usage=UNUSABLE),  # a new session: a 200 it cannot use
        ]
    )
    results = [
        compacting_worker.run_async(sid, text, agent="compacting").run_result(timeout=60)
        for text in ("hello", "and again", "once more")
    ]
    assert [r.status for r in results] == [RunStatus.COMPLETED] * 3
    assert [r.usage for r in results] == [
        tokens(ANSWER),
        tokens(ANSWER),
        tokens(ANSWER) + tokens(SUMMARY),
    ]

    other = unique("unusable")
    failed = compacting_worker.run_async(other, "hi", agent="compacting").run_result(timeout=60)
    assert (failed.status, failed.error_type) == (RunStatus.FAILED, "ModelError")
    assert failed.usage == tokens(UNUSABLE)
    asked = [r.body["model"] for r in openai_server.model_requests()]
    assert asked == ["test-model", "test-model", SUMMARY_MODEL, "test-model", "test-model"]

    # the committed logs hold them (a failed run's too), for the sums of a session's log (the
    # console's session cost)
    reader = chaos.reader()
    recorded = [
        e.payload
        for session in (sid, other)
        for e in reader.events(session)
        if e.type is EventType.MODEL_USAGE
    ]
    assert recorded == [
        ModelUsagePayload(model=SUMMARY_MODEL, usage=tokens(SUMMARY), call="compaction"),
        ModelUsagePayload(model="test-model", usage=tokens(UNUSABLE), call="unusable_answer"),
    ]
