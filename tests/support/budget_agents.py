"""An agent whose model call takes a while and logs when it runs, for the fleet-limit tests;
loaded by workers through TETHER_AGENT_MODULES. The log (``BUDGET_TEST_CALL_LOG``) gets one line
per call, ``<start> <end>`` in wall-clock seconds, appended by every worker process."""

from __future__ import annotations

import os
import time

from tether import Agent, ModelResponse, ScriptedModel
from tether.models.base import ModelRequest

MODEL = "limited-model"
CALL_S = 0.4


def _slow(request: ModelRequest) -> ModelResponse:
    started = time.time()
    time.sleep(CALL_S)
    with open(os.environ["BUDGET_TEST_CALL_LOG"], "a") as log:
        log.write(f"{started} {time.time()}\n")
    return ModelResponse.final("called")


TETHER_AGENTS = {"slowcall": lambda: Agent(ScriptedModel(responder=_slow), MODEL)}
