"""Loaded by the chaos workers through TETHER_AGENT_MODULES: a zombie at the head PUT on demand.

When the chaos engine writes ``<CHAOS_FREEZE_DIR>/arm``, the first worker process to reach
``before head_put`` of any commit claims it (an atomic rename to ``frozen-<pid>``) and stops
itself with SIGSTOP, past its last lease check with its lease held; the engine SIGCONTs it after
its lease has expired and the session was taken over (#18 hole 2 under load).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tether.worker.engine.commit import CommitStep, StepContext, install_probe

#: No agents of its own: the built-in agents serve the runs.
TETHER_AGENTS: dict[str, object] = {}


def _probe(ctx: StepContext) -> None:
    if ctx.step is not CommitStep.HEAD_PUT or ctx.phase != "before":
        return
    directory = Path(os.environ["CHAOS_FREEZE_DIR"])
    try:
        (directory / "arm").rename(directory / f"frozen-{os.getpid()}")
    except FileNotFoundError:
        return  # not armed, or another worker claimed it first
    os.kill(os.getpid(), signal.SIGSTOP)


if os.environ.get("CHAOS_FREEZE_DIR"):
    install_probe(_probe)
