"""Agents for the fleet-limit tests: ``slowcall``, whose model call takes a while and logs when it
runs; ``freecall`` and ``limitedcall``, answered at once, on a model without and with a limit;
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

#: A model no test configures a limit for.
FREE_MODEL = "free-model"

TETHER_AGENTS |= {
    # instant answers, for counting what the model edge costs in Redis
    "freecall": lambda: Agent(ScriptedModel(), FREE_MODEL),
    "limitedcall": lambda: Agent(ScriptedModel(), MODEL),
}

#: The model of the fair-share test (tests/test_model_shares_workers.py), limited by that test.
SHARED_MODEL = "shared-model"


def _labelled(label: str) -> Agent:
    """A ``slowcall`` on :data:`SHARED_MODEL` whose log lines start with ``label`` (a model
    call does not know its run's tenant: each tenant's runs use their own agent)."""

    def call(request: ModelRequest) -> ModelResponse:
        started = time.time()
        time.sleep(CALL_S)
        with open(os.environ["BUDGET_TEST_CALL_LOG"], "a") as log:
            log.write(f"{label} {started} {time.time()}\n")
        return ModelResponse.final("called")

    return Agent(ScriptedModel(responder=call), SHARED_MODEL)


TETHER_AGENTS |= {f"sharecall-{label}": (lambda label=label: _labelled(label)) for label in "ab"}
