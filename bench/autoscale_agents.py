"""The agent of the autoscaling scenario: a few durable steps, each with a tool whose effect is
counted outside Tether, in Redis, per ``(run, step)``.

Workers load it through ``TETHER_AGENT_MODULES`` with ``BENCH_EFFECTS_URL`` (the Redis that
counts) and ``BENCH_EFFECTS_PREFIX``. A step redone (a tool run again after a hand-back or a
crash) shows as a ``(run, step)`` counted twice, or as a model call too many.
"""

from __future__ import annotations

import os
import time
import uuid

import redis

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput
from tether.models.base import ModelRequest
from tether.runtime.options import AgentOptions
from tether.runtime.tools import ToolContext

STEPS = 3
#: Each tool call takes this long: enough for a burst to queue up behind one worker.
STEP_S = 0.05


def effects_key(prefix: str) -> str:
    """The hash ``<run id>:<step>`` -> times the step's tool ran."""
    return f"{prefix}:effects"


def model_calls_key(prefix: str) -> str:
    """The counter of model calls."""
    return f"{prefix}:model_calls"


def _stepping_agent() -> Agent:
    client = redis.Redis.from_url(os.environ["BENCH_EFFECTS_URL"])
    prefix = os.environ["BENCH_EFFECTS_PREFIX"]

    @tool
    def effect(ctx: ToolContext) -> str:
        """Do one step's outside effect."""
        time.sleep(STEP_S)
        client.hincrby(effects_key(prefix), f"{ctx.run_id}:{ctx.step}", 1)
        return "done"

    def respond(request: ModelRequest) -> ModelResponse:
        client.incr(model_calls_key(prefix))
        done = sum(1 for item in request.items if isinstance(item, ToolOutput))
        if done >= STEPS:
            return ModelResponse.final(f"stepped {done}")
        return ModelResponse.call(f"call_{uuid.uuid4().hex[:12]}", "effect", {})

    return Agent(
        ScriptedModel(responder=respond, keep_requests=0),
        "scripted-steps",
        tools=[effect],
        name="stepper",
        options=AgentOptions(max_steps=STEPS + 3, durability="step"),
    )


TETHER_AGENTS = {"stepper": _stepping_agent}
