"""A 4-step agent for the durable-runs chaos test (workers load it via TETHER_AGENT_MODULES).

Each run calls ``mark`` four times (fresh random call ids, as real models produce), then answers.
``mark`` takes a moment, counts every execution of its idempotency key in Redis, and applies its
side effect once per key (a set). The model counts its calls in Redis too.
"""

from __future__ import annotations

import os
import time
import uuid

import redis

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput, UserMessage
from tether.models.base import ModelRequest
from tether.runtime.tools import ToolContext

STEPS = 4


def _client() -> tuple[redis.Redis, str]:
    return redis.Redis.from_url(os.environ["COUNTER_REDIS_URL"]), os.environ["COUNTER_PREFIX"]


@tool
def mark(n: int, ctx: ToolContext) -> str:
    """One step of work with a side effect."""
    client, prefix = _client()
    client.hincrby(f"{prefix}:exec", ctx.idempotency_key, 1)
    time.sleep(0.15)
    client.sadd(f"{prefix}:effects", ctx.idempotency_key)
    return f"marked {n}"


def _respond(request: ModelRequest) -> ModelResponse:
    client, prefix = _client()
    client.incr(f"{prefix}:model_calls")
    items = request.items
    start = max(i for i, item in enumerate(items) if isinstance(item, UserMessage))
    done = sum(isinstance(item, ToolOutput) for item in items[start:])
    if done >= STEPS:
        return ModelResponse.final(f"done {done}")
    return ModelResponse.call(f"call_{uuid.uuid4().hex[:10]}", "mark", {"n": done + 1})


def steps_agent() -> Agent:
    """Four tool steps per run, step durability (the default)."""
    return Agent(ScriptedModel(responder=_respond), "scripted-steps", tools=[mark], name="steps4")


TETHER_AGENTS = {"steps4": steps_agent}
