"""Loaded by worker processes through TETHER_AGENT_MODULES: kills the worker at a commit step.

A session named ``crashat-<suffix>-<step>-<phase>`` makes the first worker that reaches that
point of one of its commits SIGKILL itself (its pool child, with the lease held), once: a marker
file in ``CRASH_TEST_DIR`` records that the crash happened, so the next attempt goes on. A
session named ``crashwake-<suffix>-<step>-<phase>`` (:func:`wake_session_for`) crashes there only
in a wake (the continuation that settles a parked call, run id ``run-wake-...``): its run parks
unharmed, whenever the wake comes.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tether.worker.engine.commit import StepContext, install_probe

PREFIX = "crashat-"
WAKE_PREFIX = "crashwake-"
#: No agents of its own: the built-in ``calculator`` serves the runs.
TETHER_AGENTS: dict[str, object] = {}


def crash_worker_env(
    base: dict[str, str], crash_dir: Path, queue: str, *agent_modules: str
) -> dict[str, str]:
    """The environment of workers whose probe SIGKILLs them where a session's id says
    (:func:`session_for`): these agents and ``agent_modules``, ``crash_dir`` for the marks of
    the crashes that happened, and every commit archiving, so that every step is reached."""
    crash_dir.mkdir()
    return dict(
        base,
        TETHER_AGENT_MODULES=json.dumps(["tests.support.crash_agents", *agent_modules]),
        CRASH_TEST_DIR=str(crash_dir),
        TETHER_QUEUE=queue,
        TETHER_ARCHIVE_BATCH_EVENTS="1",
    )


def session_for(step: str, phase: str, suffix: str) -> str:
    """The session id that asks for a crash at ``phase`` of ``step``."""
    return f"{PREFIX}{suffix}-{step}-{phase}"


def wake_session_for(step: str, phase: str, suffix: str) -> str:
    """The session id that asks for a crash at ``phase`` of ``step`` of a wake's commit."""
    return f"{WAKE_PREFIX}{suffix}-{step}-{phase}"


def _probe(ctx: StepContext) -> None:
    wake_only = ctx.session_id.startswith(WAKE_PREFIX)
    if not (wake_only or ctx.session_id.startswith(PREFIX)):
        return
    if wake_only and not (ctx.run_id or "").startswith("run-wake-"):
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
