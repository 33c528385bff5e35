"""Loaded by worker processes through TETHER_AGENT_MODULES: an agent that answers with its
process's collector state (``tests/test_worker_heap_workers.py``)."""

from __future__ import annotations

import gc
import json
import os

from tether import Agent, ModelResponse, ScriptedModel
from tether.models.base import ModelRequest


def _heap(request: ModelRequest) -> ModelResponse:
    state = {
        "pid": os.getpid(),
        "frozen": gc.get_freeze_count(),
        "tracked": len(gc.get_objects()),  # what a full collection scans (frozen ones are not)
    }
    return ModelResponse.final(json.dumps(state))


TETHER_AGENTS = {
    "heap": lambda: Agent(ScriptedModel(responder=_heap, keep_requests=0), name="heap")
}
