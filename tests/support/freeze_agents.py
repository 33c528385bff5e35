"""Loaded by worker processes through TETHER_AGENT_MODULES: freezes a worker at its head PUT.

Once the test writes ``<FREEZE_TEST_DIR>/<session>.arm``, a session named ``freeze-…`` makes the
first worker that reaches ``before head_put`` of one of its commits stop itself with SIGSTOP
(its pool child, lease held, past its last lease check), once: the marker
``<FREEZE_TEST_DIR>/<session>.frozen`` holds its pid so the test can SIGCONT it. The next worker
to reach that point (the lease taker) writes ``<session>.taker`` and waits until the test writes
``<session>.go``, so the test decides which of the two PUTs comes first.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tether.worker.engine.commit import CommitStep, StepContext, install_probe

PREFIX = "freeze-"
#: No agents of its own: the built-in ``calculator`` serves the runs.
TETHER_AGENTS: dict[str, object] = {}
GO_TIMEOUT_S = 60.0


def _marker(session_id: str, kind: str) -> Path:
    return Path(os.environ["FREEZE_TEST_DIR"]) / f"{session_id}.{kind}"


def _probe(ctx: StepContext) -> None:
    if not ctx.session_id.startswith(PREFIX) or ctx.step is not CommitStep.HEAD_PUT:
        return
    if ctx.phase != "before" or not _marker(ctx.session_id, "arm").exists():
        return
    frozen = _marker(ctx.session_id, "frozen")
    try:
        with frozen.open("x") as out:
            out.write(str(os.getpid()))
    except FileExistsError:
        pass
    else:
        os.kill(os.getpid(), signal.SIGSTOP)  # resumes here on the test's SIGCONT
        return
    taker = _marker(ctx.session_id, "taker")
    if taker.exists():
        return
    taker.write_text(str(os.getpid()))
    deadline = time.monotonic() + GO_TIMEOUT_S
    while not _marker(ctx.session_id, "go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)


if os.environ.get("FREEZE_TEST_DIR"):
    install_probe(_probe)
