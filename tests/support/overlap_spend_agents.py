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

from tests.support.spend_agents import PRICED, progress, respond, work
from tether import Agent, ModelResponse, ScriptedModel
from tether.models.base import ModelRequest

#: How long a model call takes: long enough that concurrent runs' steps overlap.
CALL_S = 0.5
#: How long a first call waits for the other runs' before giving up (then the test fails).
BARRIER_S = 90.0


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
    if progress(request)[1] == 0:
        _barrier()
    time.sleep(CALL_S)
    return respond(request)


TETHER_AGENTS = {
    "slowspender": lambda: Agent(ScriptedModel(responder=_respond), PRICED, tools=[work]),
}
