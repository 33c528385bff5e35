"""A provider's 429 and the fleet-wide model limit: for a model with a limit, the SDK does not
retry the 429 inside one process (which would hide it from the fleet and keep every other
worker sending); it reaches the budget gate, which pauses the model for everyone for the
answer's Retry-After. Against the test server process (tests/support/openai_server.py) and a
real worker; the Retry-After parsing of the SDK error mapping on real ``httpx`` responses."""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.support.openai_fixture import OpenAIServer, reply
from tests.support.stack import Stack, eventually, unique
from tether.core.items import UserMessage
from tether.dev.workers import WorkerFleet
from tether.errors import ModelError
from tether.keys import RedisKeys
from tether.models.base import ModelRequest
from tether.models.openai import OpenAIChatModel, OpenAIResponsesModel
from tether.models.openai_errors import retry_after_s
from tether.persistence.redis_conn import redis_from_url
from tether.producer import Producer
from tether.runs.limits.gate import BudgetedModel, estimate_tokens
from tether.runs.limits.redis import RedisModelBudget
from tether.settings.limits import ModelLimit, ModelLimits

MODEL = "test-model"
QUEUE = "limit429"
RETRY_AFTER_S = 2.5  # long enough that a starved test process still sees the pause
REQUEST = ModelRequest(model=MODEL, items=(UserMessage(content="hi"),))

# --- Retry-After parsing ------------------------------------------------------------------------


def _wait(headers: dict[str, str]) -> float | None:
    return retry_after_s(httpx.Response(429, headers=headers))


def test_retry_after_ms_wins_and_is_in_milliseconds() -> None:
    assert _wait({"retry-after-ms": "1500"}) == 1.5
    assert _wait({"retry-after-ms": "250", "retry-after": "7"}) == 0.25


def test_retry_after_in_seconds_whole_or_fractional() -> None:
    assert _wait({"Retry-After": "2"}) == 2.0
    assert _wait({"Retry-After": "0.75"}) == 0.75


def test_retry_after_as_an_http_date_is_the_time_until_then() -> None:
    soon = email.utils.formatdate(time.time() + 30, usegmt=True)
    wait = _wait({"Retry-After": soon})
    assert wait is not None and 25 < wait <= 31  # whole seconds in the date, a slow machine
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert _wait({"Retry-After": past}) is None


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Retry-After": "soon"},
        {"Retry-After": ""},
        {"Retry-After": "0"},
        {"Retry-After": "-3"},
        {"Retry-After": "Mon, 99 Foo 2026 99:99:99 GMT"},
        {"retry-after-ms": "lots"},
        {"retry-after-ms": "-10"},
    ],
)
def test_absent_unreadable_or_not_positive_retry_after_is_none(headers: dict[str, str]) -> None:
    assert _wait(headers) is None


def test_no_response_is_none() -> None:
    assert retry_after_s(None) is None


# --- the SDK client on the budgeted path ----------------------------------------------------------


@pytest.mark.parametrize("client", [OpenAIChatModel, OpenAIResponsesModel])
def test_surfacing_client_raises_a_429_at_once_and_still_retries_a_500(
    openai_server: OpenAIServer, client: type[OpenAIChatModel | OpenAIResponsesModel]
) -> None:
    model = client(openai_server.base_url, openai_server.api_key, max_retries=2, timeout_s=10)
    surfacing = model.surfacing_rate_limits()
    assert surfacing.surfacing_rate_limits() is surfacing
    openai_server.fail_next(1, 429, retry_after_s=30, message="slow down")
    with pytest.raises(ModelError) as caught:
        surfacing.complete(REQUEST)
    # one request: the SDK did not wait the 30 s out itself
    assert [r.status for r in openai_server.model_requests()] == [429]
    error = caught.value
    assert (error.status, error.retry_after_s) == (429, 30.0)
    assert "attempt" not in str(error) and "TETHER_MODEL_LIMITS" in str(error)

    openai_server.reset()
    openai_server.fail_next(1, 500, retry_after_s=0.01)
    openai_server.script(["after a 500"])
    assert surfacing.complete(REQUEST).text == "after a 500"
    assert [r.status for r in openai_server.model_requests()] == [500, 200]
    # the client it came from still retries 429s itself
    openai_server.reset()
    openai_server.fail_next(1, 429, retry_after_s=0.01)
    openai_server.script(["retried by the SDK"])
    assert model.complete(REQUEST).text == "retried by the SDK"


def test_async_surfacing_client_raises_a_429_at_once(openai_server: OpenAIServer) -> None:
    model = OpenAIChatModel(openai_server.base_url, openai_server.api_key, max_retries=2)
    surfacing = model.surfacing_rate_limits()
    openai_server.fail_next(1, 429, retry_after_s=30)

    async def call() -> None:
        async with surfacing:
            await surfacing.acomplete(REQUEST)

    with pytest.raises(ModelError) as caught:
        asyncio.run(call())
    assert caught.value.status == 429
    assert [r.status for r in openai_server.model_requests()] == [429]


# --- a worker with a limit for the model --------------------------------------------------------


@pytest.fixture(scope="module")
def limited_worker(
    stack: Stack, openai_server_process: OpenAIServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Producer]:
    """One worker whose ``assistant`` calls the test server, with a (high) limit for its model
    and the SDK's default 2 retries."""
    tmp: Path = tmp_path_factory.mktemp("limit429")
    server = openai_server_process
    env = dict(
        stack.env,
        TETHER_QUEUE=QUEUE,
        TETHER_OPENAI_BASE_URL=server.base_url,
        TETHER_OPENAI_API_KEY=server.api_key,
        TETHER_OPENAI_MODEL=MODEL,
        TETHER_OPENAI_API="chat",
        TETHER_OPENAI_MAX_RETRIES="2",
        TETHER_OPENAI_TIMEOUT_S="10",
        TETHER_MODEL_LIMITS=json.dumps({MODEL: {"requests_per_minute": 6000}}),
    )
    producer = Producer(stack.settings.model_copy(update={"queue": QUEUE}))
    fleet = WorkerFleet(env, tmp, count=1, queue=QUEUE, prefix="limit429")
    fleet.start()
    try:
        yield producer
    finally:
        fleet.stop()
        producer.close()


def test_a_429_burst_pauses_the_model_for_the_whole_fleet_and_the_run_completes(
    stack: Stack, openai_server: OpenAIServer, limited_worker: Producer
) -> None:
    client = redis_from_url(stack.settings.effective_redis_url)
    keys = RedisKeys(stack.settings.namespace)
    _, _, pause_key = keys.model_budget(MODEL)
    other_worker = RedisModelBudget(client, keys)  # what any other worker's gate would ask
    openai_server.fail_next(2, 429, retry_after_s=RETRY_AFTER_S, message="slow down")
    openai_server.script(["made it"])

    handle = limited_worker.run_async(unique("limit429"), "hi", agent="assistant")
    # the worker's gate heard the 429 (the SDK did not retry it) and paused the model in Redis
    eventually(lambda: int(client.pttl(pause_key)) > 0, timeout_s=60, interval_s=0.01)
    answer = other_worker.admit(MODEL, ModelLimit(requests_per_minute=6000), unique("t"), 10)
    assert (answer.admitted, answer.reason) == (False, "paused")
    assert 0 < answer.wait_s <= RETRY_AFTER_S

    result = handle.result(timeout=60)
    assert (result.status, result.output, result.attempts) == ("COMPLETED", "made it", 1)
    sent = openai_server.model_requests()
    assert [r.status for r in sent] == [429, 429, 200]
    # nothing reached the server while the model was paused: the pause began after the 429
    # arrived, so the next request came at least Retry-After after it
    for answered, following in itertools.pairwise(sent):
        assert following.received_at - answered.received_at >= RETRY_AFTER_S
    assert int(client.pttl(pause_key)) < 0  # the pause ended by itself
    client.close()


def test_a_refused_attempt_leaves_none_of_its_estimate_charged(
    openai_server: OpenAIServer, redis_client: redis.Redis
) -> None:
    """An attempt the provider answers with an error (a 429, a 500) used no tokens: it is
    credited its whole estimate. Each 429 kept a large prompt's estimate charged to the model's
    fleet-wide tokens per minute, so every worker calling it waited for tokens no request used
    (three 429s with a 0.05 s Retry-After held a 100,000-token call for 30 s at 600,000 a
    minute). Measured as the tokens still charged ahead of now, with and without the 429s."""
    limits = ModelLimits.parse(json.dumps({MODEL: {"tokens_per_minute": 600_000}}))
    limit = limits.for_model(MODEL)
    assert limit is not None
    keys = RedisKeys(f"refused-{unique()}")
    budget_key = keys.model_budget(MODEL)[0]
    model = OpenAIChatModel(openai_server.base_url, openai_server.api_key, max_retries=0)
    gated = BudgetedModel(model, RedisModelBudget(redis_client, keys), limits)
    request = ModelRequest(model=MODEL, items=(UserMessage(content="x" * 400_000),))
    assert estimate_tokens(request) > 50_000

    def charged_ahead() -> float:
        seconds, micros = redis_client.time()
        tat_us = int(redis_client.hget(budget_key, "tat_tok") or 0)
        return max(0, tat_us - (seconds * 1_000_000 + micros)) / limit.us_per_token

    usage = {"input_tokens": 1000, "output_tokens": 100}
    openai_server.script([reply("ok", usage=usage)])
    gated.complete(request)
    clean = charged_ahead()
    redis_client.delete(budget_key)
    openai_server.fail_next(3, 429, retry_after_s=0.05)
    openai_server.script([reply("ok", usage=usage)])
    gated.complete(request)
    after_429s = charged_ahead()

    assert after_429s <= clean + 2_000  # 1,100 used; the clock moved on a little in between
    # an answer the client cannot use (a tool call without a name) was billed: what the provider
    # reported stays charged, not the estimate
    redis_client.delete(budget_key)
    openai_server.script([reply(None, [("c1", "", "{}")], usage=usage)])
    with pytest.raises(ModelError):
        gated.complete(request)
    assert clean - 2_000 <= charged_ahead() <= clean + 2_000
