"""The built-in ``assistant`` agent on a real Celery worker process, its model the SDK client
pointed at the test server process (tests/support/openai_server.py): the worker checks the
endpoint at start, runs complete with the model's answer, a malformed answer fails its run and
leaves the session as it was, and the key is nowhere in Redis, the store or the worker's log."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.chaos_stack import ChaosStack
from tests.support.openai_fixture import OpenAIServer, reply
from tests.support.stack import unique
from tether.core.events import ErrorPayload, EventType
from tether.core.results import RunStatus
from tether.producer.client import Producer
from tether.runtime.model_agents import ASSISTANT_PROMPT

pytest_plugins = ["tests.support.chaos_fixtures"]  # the chaos_stack and chaos fixtures

QUEUE = "assistant"


@pytest.fixture
def assistant_worker(chaos: ChaosStack, openai_server: OpenAIServer) -> Iterator[Producer]:
    """A worker on its own queue whose ``assistant`` talks to the test server (Responses API),
    and a producer for it."""
    settings = {
        "TETHER_OPENAI_BASE_URL": openai_server.base_url,
        "TETHER_OPENAI_API_KEY": openai_server.api_key,
        "TETHER_OPENAI_MODEL": "test-model",
        "TETHER_OPENAI_API": "responses",
        "TETHER_OPENAI_CHECK_MODELS": "test-model",
        "TETHER_OPENAI_TIMEOUT_S": "10",
        "TETHER_OPENAI_MAX_RETRIES": "1",
    }
    with chaos.queue_worker(QUEUE, settings) as producer:
        yield producer


def test_assistant_on_a_worker_answers_from_the_server_and_the_key_is_nowhere(
    chaos: ChaosStack, openai_server: OpenAIServer, assistant_worker: Producer
) -> None:
    key = openai_server.api_key
    # the worker checked the endpoint and the model before it consumed anything
    (check,) = openai_server.requests()
    assert (check.method, check.path, check.status) == ("GET", "/v1/models", 200)

    sid = unique("assistant")
    usage = {"input_tokens": 30, "output_tokens": 6, "cached_tokens": 24, "reasoning_tokens": 2}
    openai_server.script([reply("Hello from the model.", usage=usage)])
    answered = assistant_worker.run(sid, "hi", agent="assistant", wait_s=60)
    assert answered.status is RunStatus.COMPLETED
    assert answered.output == "Hello from the model."
    assert (answered.usage.cached_tokens, answered.usage.reasoning_tokens) == (24, 2)
    sent = openai_server.model_requests()[-1]
    assert sent.path == "/v1/responses"
    assert sent.headers["authorization"] == f"Bearer {key}"
    assert sent.body["instructions"] == ASSISTANT_PROMPT
    assert sent.body["input"] == [{"role": "user", "content": "hi"}]

    # the same from the command line: `tether run SESSION INPUT --agent assistant`
    openai_server.script(["Hello again."])
    command = [sys.executable, "-m", "tether.producer.ops.cli", "run", sid, "hi again"]
    env = {**chaos.env, "TETHER_QUEUE": QUEUE}
    cli = subprocess.run(
        [*command, "--agent", "assistant"], env=env, capture_output=True, text=True, timeout=120
    )
    assert (cli.returncode, cli.stdout.strip()) == (0, "Hello again."), cli.stderr

    # an answer the client cannot read (it echoes the key): the run fails, rolled back, so the
    # session's memory stays as it was; the log says what happened
    reader = chaos.reader()
    before = reader.read(sid)
    assert before is not None
    openai_server.script([reply("unused", malformed=True)])
    failed = assistant_worker.run_async(sid, "and now?", agent="assistant").run_result(timeout=60)
    assert failed.status is RunStatus.FAILED and failed.error_type == "ModelError"
    assert "sent a malformed" in (failed.error_message or "")
    assert "MALFORMED key=***" in (failed.error_message or "")
    after = reader.read(sid)
    assert after is not None and after.memory == before.memory
    errors = [e for e in reader.events(sid) if e.type is EventType.ERROR]
    assert [e.seq > before.last_seq for e in errors] == [True]
    assert isinstance(errors[0].payload, ErrorPayload)
    assert "MALFORMED key=***" in errors[0].payload.message

    assert chaos.secret_hits({"api key": key.encode()}) == []
    assert b"Hello from the model." in b"".join(chaos.s3_objects().values())  # it was stored
