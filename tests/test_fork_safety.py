"""A pool child forked while a thread of the worker's main process imports a module would hang
on its first import of that module (fork copies the module's import lock, held by a thread the
child does not have). The main process therefore imports what its threads use before starting
them: a sweeper pass, a timers pass and a wait reconcile on a real stack (redis-server, S3 over
HTTP) import nothing new after :func:`~tether.worker.fork_safety.warm_main_process`."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.stack import Stack

_PASSES = """
import json, sys
from tether.worker.tasks import get_services
from tether.worker.fork_safety import warm_main_process
from tether.worker.engine.recovery import sweep_once
from tether.worker.engine.wait_reconcile import reconcile_waits
from tether.worker.engine.wakes import wake_due

services = get_services()
if sys.argv[1] == "warm":
    warm_main_process(services)
before = set(sys.modules)
sweep_once(services, unclaimed=True)
wake_due(services)
reconcile_waits(services)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _imported_by_the_passes(stack: Stack, mode: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PASSES, mode],
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_main_process_threads_import_nothing_after_the_warm_up(stack: Stack) -> None:
    cold = _imported_by_the_passes(stack, "cold")
    assert "boto3" in cold  # without the warm-up, the first S3 use imports it in the thread
    assert _imported_by_the_passes(stack, "warm") == []
