"""Loaded by worker processes through TETHER_AGENT_MODULES for the batch retry tests.

``flaky`` fails with a ModelError while the file named by ``$EVAL_FAIL_MARKER`` exists (as a
model provider that is down), and echoes otherwise: a test runs a batch with the marker in place,
removes it, and retries.
"""

from __future__ import annotations

import os
from pathlib import Path

from tether import Agent, ModelResponse, ScriptedModel
from tether.errors import ModelError
from tether.models.base import ModelRequest

MARKER_VARIABLE = "EVAL_FAIL_MARKER"


def _answer(request: ModelRequest) -> ModelResponse:
    marker = os.environ.get(MARKER_VARIABLE)
    if marker and Path(marker).exists():
        raise ModelError("the test model provider is down (marker file present)", status=503)
    text = str(request.items[-1].model_dump().get("content", ""))
    return ModelResponse.final(f"flaky: {text}")


def flaky() -> Agent:
    """Fails while the marker exists, then answers ``flaky: <input>``."""
    return Agent(ScriptedModel(responder=_answer), name="flaky")


TETHER_AGENTS = {"flaky": flaky}
