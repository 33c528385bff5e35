"""The agent of examples/durable_run.py, loaded by the workers (TETHER_AGENT_MODULES).

``ledger`` takes five steps; each calls ``post`` once, which appends a line to a ledger file
unless a line with the same idempotency key is already there: the tool's own exactly-once.
"""

from __future__ import annotations

import fcntl
import os
import time
import uuid
from pathlib import Path

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput
from tether.models.base import ModelRequest
from tether.runtime.options import AgentOptions
from tether.runtime.tools import ToolContext

STEPS = 5


@tool
def post(entry: str, ctx: ToolContext) -> str:
    """Append an entry to the ledger, once per idempotency key."""
    time.sleep(0.5)  # a slow side effect: there is time to kill the worker mid-run
    ledger = Path(os.environ["EXAMPLE_LEDGER"])
    with ledger.open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        if any(line.startswith(ctx.idempotency_key) for line in handle):
            return "already posted"
        handle.write(f"{ctx.idempotency_key} step={ctx.step} {entry}\n")
    return "posted"


def _respond(request: ModelRequest) -> ModelResponse:
    done = sum(1 for item in request.items if isinstance(item, ToolOutput))
    if done >= STEPS:
        return ModelResponse.final(f"posted {done} entries")
    # real models return fresh call ids: only a recorded call keeps its key
    call_id = f"call_{uuid.uuid4().hex[:8]}"
    return ModelResponse.call(call_id, "post", {"entry": f"entry {done + 1}"})


def ledger_agent() -> Agent:
    """Five steps, one side effect each, step durability (the default)."""
    return Agent(
        ScriptedModel(responder=_respond),
        "scripted-ledger",
        tools=[post],
        name="ledger",
        options=AgentOptions(max_steps=STEPS + 2, durability="step"),
    )


TETHER_AGENTS = {"ledger": ledger_agent}
