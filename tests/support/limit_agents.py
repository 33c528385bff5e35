"""Agents whose tool outlives its ``timeout_s`` (#29 item 7); loaded by workers through
TETHER_AGENT_MODULES.

``slow <pid-file>`` starts a child process (``sleep 600``), writes its pid to the file, then waits
far past the tool's 1 s limit; ``hog <exponent>`` holds the GIL in one big-integer power, also past
its 1 s limit. The model ends with the tool's output, so the run's output is what the tool returned
(or the error it failed with).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput, UserMessage
from tether.models.base import ModelRequest
from tether.runtime.tools import Tool

LIMIT_S = 1.0


@tool(name="slow", description="Start a helper process and wait for it.", timeout_s=LIMIT_S)
def slow(pid_file: str) -> str:
    child = subprocess.Popen(["sleep", "600"])
    Path(pid_file).write_text(str(child.pid))
    time.sleep(60)
    return "slept"


@tool(name="hog", description="Compute 7**exponent holding the GIL.", timeout_s=LIMIT_S)
def hog(exponent: int) -> str:
    return f"burned: {pow(7, exponent).bit_length()} bits"


def is_running(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waits for its reaper but runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _responder(request: ModelRequest) -> ModelResponse:
    last = request.items[-1] if request.items else None
    if isinstance(last, ToolOutput):
        return ModelResponse.final(last.output)
    text = next(i.content for i in reversed(request.items) if isinstance(i, UserMessage))
    name, arg = text.split(maxsplit=1)
    args: dict[str, object] = {"pid_file": arg} if name == "slow" else {"exponent": int(arg)}
    return ModelResponse.call(f"call_{len(request.items)}", name, args)


def _agent(name: str, tools: list[Tool]) -> Agent:
    return Agent(ScriptedModel(responder=_responder), "scripted-limits", tools=tools, name=name)


def limited() -> Agent:
    """Its tools overrun their 1 s limit."""
    return _agent("limited", [slow, hog])


TETHER_AGENTS = {"limited": limited}
