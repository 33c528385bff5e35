"""Loaded by worker processes through TETHER_AGENT_MODULES: kills the worker at a commit step.

A session named ``crashat-<suffix>-<step>-<phase>`` makes the first worker that reaches that
point of one of its commits SIGKILL itself (its pool child, with the lease held), once: a marker
file in ``CRASH_TEST_DIR`` records that the crash happened, so the next attempt goes on.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tether.worker.engine.commit import StepContext, install_probe

PREFIX = "crashat-"
#: No agents of its own: the built-in ``calculator`` serves the runs.
TETHER_AGENTS: dict[str, object] = {}


def session_for(step: str, phase: str, suffix: str) -> str:
    """The session id that asks for a crash at ``phase`` of ``step``."""
    return f"{PREFIX}{suffix}-{step}-{phase}"


def _probe(ctx: StepContext) -> None:
    if not ctx.session_id.startswith(PREFIX):
        return
    wanted = ctx.session_id.rsplit("-", 2)[1:]  # step names hold no '-'
    if wanted != [ctx.step.value, ctx.phase]:
        return
    marker = Path(os.environ["CRASH_TEST_DIR"]) / ctx.session_id
    try:
        marker.touch(exist_ok=False)
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


if os.environ.get("CRASH_TEST_DIR"):
    install_probe(_probe)
