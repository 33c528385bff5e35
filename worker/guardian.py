"""The guardian thread of a prefork worker's main process (see :mod:`tether.worker.engine.guard`).

The pool children write watch records into a directory made here before the pool forks them;
this process renews their leases while they live and SIGKILLs a child whose run is past its
deadline, so a tool that holds the GIL can neither lose its run's lease nor outlive its run.
With the solo or threads pool there is no other process to watch from: the lease keeper alone.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery.signals import worker_init, worker_shutdown

from tether.errors import TetherError
from tether.runs.contract import RunRef
from tether.worker.engine.guard import FileGuard, Guardian, NoGuard, RunGuard, WatchRecord
from tether.worker.engine.services import EngineServices

log = logging.getLogger(__name__)

#: A run's own timeout ends it cooperatively at its deadline; the kill is for a process that
#: could not get there (a tool holding the GIL), so it waits a little longer than one commit.
MIN_GRACE_S = 5.0

_directory: Path | None = None
_main_pid: int | None = None
_guardian: Guardian | None = None


def guard_for_this_process() -> RunGuard:
    """A :class:`FileGuard` in a prefork pool child, else a no-op."""
    if _directory is None or os.getpid() == _main_pid:
        return NoGuard()
    return FileGuard(_directory)


@worker_init.connect
def _make_directory(sender: Any = None, **_: Any) -> None:
    global _directory, _main_pid
    if "prefork" not in str(getattr(sender, "pool_cls", "")).lower():
        return
    _directory = Path(tempfile.mkdtemp(prefix="tether-guard-"))
    _main_pid = os.getpid()


def start_guardian(get_services: Callable[[], EngineServices]) -> None:
    """Start this worker's guardian (prefork only), once the worker is ready.

    ``get_services`` builds the process's engine services: the Celery tasks module owns them
    and calls this from its ``worker_ready`` handler, so this module never imports the tasks."""
    global _guardian
    if _directory is None:
        return
    try:
        services = get_services()
    except TetherError as exc:
        log.error("guardian not started: %s", exc)
        return
    ttl_ms = services.settings.lease_ttl_ms

    def note_kill(record: WatchRecord) -> None:
        services.runs.note_failure(
            RunRef(record.tenant, record.session_id, record.run_id),
            f"RunTimeout: the run was still computing {MIN_GRACE_S:.0f}+ s after its deadline "
            "(a tool that never yields: declare it isolated=True to give it its own time limit); "
            "its worker process was killed",
            retry_after_ms=0,
        )

    _guardian = Guardian(
        _directory,
        services.leases,
        ttl_ms,
        grace_s=max(MIN_GRACE_S, 2 * ttl_ms / 1000),
        on_kill=note_kill,
    )
    _guardian.start()


@worker_shutdown.connect
def _stop_guardian(**_: Any) -> None:
    if _guardian is not None:
        _guardian.stop()
    if _directory is not None and os.getpid() == _main_pid:
        shutil.rmtree(_directory, ignore_errors=True)
