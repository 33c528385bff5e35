"""P1 must not regress: with fleet-wide model limits configured, a run whose model has no limit
costs Redis exactly what it cost without any limits (the model edge adds no round trip); only
a model with a limit pays for its budget (admit and settle).

Counted by the server itself (``INFO commandstats`` of a private redis-server that nothing else
talks to: every command any client sent, and those a script ran inside the server), over 1-step
runs on an in-process engine built as a Celery worker builds it
(:func:`tether.worker.engine.services.build_services`)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from tests.support.budget_agents import MODEL
from tether.dev.redis_server import RedisServer
from tether.ids import new_id
from tether.runs.contract import RunRequest
from tether.runs.queue.base import submit
from tether.settings import Settings
from tether.worker.engine.claim import Carried
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import build_services

RUNS = 3
WARM_UP = 2
LIMITS = json.dumps({MODEL: {"requests_per_minute": 600_000, "concurrent_requests": 100}})


@pytest.fixture(scope="module")
def quiet_redis() -> Iterator[RedisServer]:
    """A redis-server only this module's engines talk to (its counters are theirs alone)."""
    server = RedisServer(unix_socket=False).start()
    try:
        yield server
    finally:
        server.close()


def _commands(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def _commands_per_run(server: RedisServer, agent: str, model_limits: str) -> int:
    """Redis commands (sent and run by scripts) of ``RUNS`` 1-step runs of ``agent``, after a
    warm-up (connections, script loads), on a fresh namespace."""
    tag = new_id("n")[-8:]
    settings = Settings(
        redis_url=server.url,
        broker_url=server.url,
        store_url="memory://",
        namespace=f"rt-{tag}",
        agent_modules=["tests.support.budget_agents"],
        model_limits=model_limits,
    )
    rt = build_services(lambda tenant, session_id: None, settings)
    counter = redis.Redis.from_url(server.url)

    def one(i: int) -> None:
        request = RunRequest(
            # the same ids in every variant: one announcement in 16, chosen by run id, trims
            # the completion feed (an extra command that has nothing to do with models)
            run_id=f"run-{i + 1:032x}", request_id=f"req-{i + 1:032x}", tenant="t",
            session_id=f"s-{i}", agent=agent, input="hi",
        )  # fmt: skip
        submit(rt.runs, request, on=settings.queue)
        assert drain(rt, "t", request.session_id, carried=Carried(request, settings.queue)) == 1
        done = rt.runs.peek_many([request.ref])[request.run_id]
        assert done is not None and done.output == "done", done

    try:
        for i in range(WARM_UP):
            one(i)
        before = _commands(counter)
        for i in range(WARM_UP, WARM_UP + RUNS):
            one(i)
        return _commands(counter) - before
    finally:
        counter.close()


def test_a_model_without_a_limit_costs_no_redis_command_when_others_have_limits(
    quiet_redis: RedisServer,
) -> None:
    without_limits = _commands_per_run(quiet_redis, "freecall", "")
    other_limited = _commands_per_run(quiet_redis, "freecall", LIMITS)
    assert other_limited == without_limits
    # the count sees the budget when the model has one: admit and settle, per call
    limited = _commands_per_run(quiet_redis, "limitedcall", LIMITS)
    assert limited >= without_limits + 2 * RUNS
