"""An agent for the concurrent-budget test (``tests/test_budget_concurrent_workers.py``), loaded
by workers through TETHER_AGENT_MODULES: ``slowspender`` answers an input ``steps=N`` like
:mod:`tests.support.spend_agents` (N tool steps, then the answer), every model call reporting
:data:`~tests.support.spend_agents.CALL` and taking :data:`CALL_S`.

So that the runs provably overlap, each run's first call waits at a barrier: it leaves a file
``arrived-*`` in ``OVERLAP_BARRIER_DIR`` and waits until ``OVERLAP_BARRIER_RUNS`` runs have (none
leaves before the last arrives, so at that moment all of them are inside their first call), then
leaves ``met-*`` (or ``missed-*`` when it gave up waiting)."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from tests.support.spend_agents import CALL, PRICED
from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput, UserMessage
from tether.models.base import ModelRequest

#: How long a model call takes: long enough that concurrent runs' steps overlap.
CALL_S = 0.5
#: How long a first call waits for the other runs' before giving up (then the test fails).
BARRIER_S = 90.0


@tool
def work(n: int) -> str:
    """One step of work."""
    return f"worked {n}"


def _barrier() -> None:
    folder = Path(os.environ["OVERLAP_BARRIER_DIR"])
    runs = int(os.environ["OVERLAP_BARRIER_RUNS"])
    me = uuid.uuid4().hex
    (folder / f"arrived-{me}").touch()
    deadline = time.monotonic() + BARRIER_S
    while len(list(folder.glob("arrived-*"))) < runs:
        if time.monotonic() > deadline:
            (folder / f"missed-{me}").touch()
            return
        time.sleep(0.02)
    (folder / f"met-{me}").touch()


def _respond(request: ModelRequest) -> ModelResponse:
    items = request.items
    start = max(i for i, item in enumerate(items) if isinstance(item, UserMessage))
    first = items[start]
    assert isinstance(first, UserMessage)
    steps = int(first.content.partition("steps=")[2] or 0)
    done = sum(isinstance(item, ToolOutput) for item in items[start:])
    if done == 0:
        _barrier()
    time.sleep(CALL_S)
    if done >= steps:
        return ModelResponse(text=f"done {done}", usage=CALL)
    call = ModelResponse.call(f"call_{uuid.uuid4().hex[:10]}", "work", {"n": done + 1})
    return ModelResponse(text=None, tool_calls=call.tool_calls, usage=CALL)


TETHER_AGENTS = {
    "slowspender": lambda: Agent(ScriptedModel(responder=_respond), PRICED, tools=[work]),
}
