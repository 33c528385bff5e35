"""A 10-step agent whose tool changes something outside Tether, deduplicating by idempotency key.

Its model answers with a tool call (a fresh random call id, as real models do) until the memory
holds ten tool results, then with a final answer. The ``increment`` tool adds one to a counter
only the first time it sees an idempotency key. Workers load it through TETHER_AGENT_MODULES
with the counter in Redis (``COUNTER_REDIS_URL``, ``COUNTER_PREFIX``); in-process tests pass a
:class:`MemoryCounter`.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter as Tally
from collections.abc import Callable
from typing import Protocol

import redis

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput
from tether.models.base import ModelRequest
from tether.runtime.options import AgentOptions, Durability
from tether.runtime.tools import ToolContext

STEPS = 10


class Counter(Protocol):
    def model_called(self) -> None: ...
    def invoked(self, key: str) -> int: ...
    def apply(self, key: str) -> None: ...


class MemoryCounter:
    """The outside world, in one process."""

    def __init__(self) -> None:
        self.total = 0
        self.model_calls = 0
        self.invocations: Tally[str] = Tally()
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def model_called(self) -> None:
        with self._lock:
            self.model_calls += 1

    def invoked(self, key: str) -> int:
        with self._lock:
            self.invocations[key] += 1
            return sum(self.invocations.values())

    def apply(self, key: str) -> None:
        with self._lock:
            if key not in self._seen:  # the tool's own exactly-once: dedupe by the key
                self._seen.add(key)
                self.total += 1


class RedisCounter:
    """The outside world, in Redis (shared by worker processes and the test)."""

    def __init__(self, url: str, prefix: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.prefix = prefix

    def model_called(self) -> None:
        self.client.incr(f"{self.prefix}:model_calls")

    def invoked(self, key: str) -> int:
        self.client.hincrby(f"{self.prefix}:invocations", key, 1)
        return int(self.client.incr(f"{self.prefix}:invocation_count"))

    def apply(self, key: str) -> None:
        if self.client.set(f"{self.prefix}:seen:{key}", b"1", nx=True):
            self.client.incr(f"{self.prefix}:total")

    def read(self, name: str) -> int:
        return int(self.client.get(f"{self.prefix}:{name}") or 0)


def counter_env(
    base: dict[str, str], redis_url: str, prefix: str, queue: str, module: str = __name__
) -> dict[str, str]:
    """Worker environment: ``module``'s agents, their own queue, the counter in Redis."""
    return dict(
        base,
        TETHER_AGENT_MODULES=module,
        TETHER_QUEUE=queue,
        COUNTER_REDIS_URL=redis_url,
        COUNTER_PREFIX=prefix,
    )


def counting_agent(
    counter: Counter,
    *,
    durability: Durability = "step",
    before_apply: Callable[[int], None] | None = None,
    before_model: Callable[[int], None] | None = None,
) -> Agent:
    """The 10-step agent. ``before_apply(n)`` runs inside the n-th tool invocation (1-based),
    before its side effect: tests crash or block a worker there; ``before_model(n)`` the same,
    in the n-th model call (after it was counted)."""

    @tool
    def increment(ctx: ToolContext) -> str:
        """Add one to the outside counter."""
        n = counter.invoked(ctx.idempotency_key)
        if before_apply is not None:
            before_apply(n)
        counter.apply(ctx.idempotency_key)
        return "ok"

    def respond(request: ModelRequest) -> ModelResponse:
        counter.model_called()
        if before_model is not None:
            before_model(counter.model_calls)
        done = sum(1 for item in request.items if isinstance(item, ToolOutput))
        if done >= STEPS:
            return ModelResponse.final(f"counted {done}")
        return ModelResponse.call(f"call_{uuid.uuid4().hex[:12]}", "increment", {})

    return Agent(
        ScriptedModel(responder=respond),
        "scripted-counter",
        tools=[increment],
        name="counter",
        options=AgentOptions(max_steps=STEPS + 5, durability=durability),
    )


def _block_on_seventh(counter: RedisCounter) -> Callable[[int], None]:
    def block(n: int) -> None:
        if n == 7 and counter.client.set(f"{counter.prefix}:blocked", b"1", nx=True):
            time.sleep(120)  # until the test SIGKILLs this worker

    return block


def _worker_agent() -> Agent:
    counter = RedisCounter(os.environ["COUNTER_REDIS_URL"], os.environ["COUNTER_PREFIX"])
    return counting_agent(counter, before_apply=_block_on_seventh(counter))


def _slow_worker_agent() -> Agent:
    counter = RedisCounter(os.environ["COUNTER_REDIS_URL"], os.environ["COUNTER_PREFIX"])
    return counting_agent(counter, before_apply=lambda n: time.sleep(0.3))


TETHER_AGENTS = {"counter": _worker_agent, "counter-slow": _slow_worker_agent}
