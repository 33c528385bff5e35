"""The agent of P17 (:mod:`bench.signals`), loaded by the benchmark's workers.

``p17``: a scripted model that notes when each of its calls starts (``time.time()``, pushed to
the Redis list ``p17:calls:<KEY>`` of ``BENCH_BROKER_URL``, so the benchmark's client reads it
with a blocking pop). Input ``fresh KEY``: it answers at once (a 1-call run). Input
``listen KEY``: its first call asks the ``await_signal`` tool for signal ``go`` (the run
parks); its next call, once the signal's wake has settled the call, answers.
"""

from __future__ import annotations

import functools
import os
import time

import redis

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput, UserMessage
from tether.models.base import ModelRequest
from tether.runtime.tools import ToolContext, Waiting


@functools.cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(os.environ["BENCH_BROKER_URL"])


@tool
def await_signal(name: str, ctx: ToolContext) -> Waiting | str:
    """Wait for signal `name`."""
    return ctx.wait_for_signal(name, 3600)


def _noting(request: ModelRequest) -> ModelResponse:
    """Note when this call started, then answer (input ``fresh KEY`` or ``listen KEY``)."""
    started = time.time()
    asks = [i for i in request.items if isinstance(i, UserMessage)]
    verb, key = asks[-1].content.split() if asks else ("fresh", "none")
    _client().rpush(f"p17:calls:{key}", repr(started))
    if verb == "fresh" or isinstance(request.items[-1], ToolOutput):
        return ModelResponse.final("done")
    return ModelResponse.call(f"call_{len(request.items)}", "await_signal", {"name": "go"})


def p17_agent() -> Agent:
    """The P17 agent (see the module doc)."""
    return Agent(ScriptedModel(responder=_noting), "scripted", tools=[await_signal], name="p17")


TETHER_AGENTS = {"p17": p17_agent}
