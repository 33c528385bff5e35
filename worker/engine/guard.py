"""A guardian outside the run's process: renews its lease, and kills it once its run has ended.

The lease heartbeat (:class:`~tether.worker.engine.lease_keeper.LeaseRenewer`) is a thread of
the process that runs the agent, so a tool that holds the GIL (a big-integer power, a C
extension that never releases it) starves it: the lease expires, the run moves to another worker
and starts again while the first process goes on computing, and after the attempt budget the run
fails while workers are still busy with it. Tools can opt into process isolation
(:mod:`tether.runtime.isolation`); this covers the rest.

The run's process writes a *watch record* (:class:`FileGuard`) naming its lease and its run's
deadline; a guardian in another process (the Celery prefork parent, see
:mod:`tether.worker.guardian`) reads the records every third of a lease TTL
(:class:`Guardian`) and, while the process is computing (running and using CPU: a stopped or
frozen process is left to lose its lease), renews the lease on its behalf (the renewal
compares owner and fence, so it cannot extend a grant that was released or taken over). Past the
deadline plus a grace it SIGKILLs the process: its run has timed out, and the next attempt starts
from the last commit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pydantic

from tether.errors import TetherError
from tether.runs.leases.base import Lease, LeaseManager

log = logging.getLogger(__name__)

WATCH_FORMAT_VERSION = 1


class RunGuard(Protocol):
    """What the drain tells its guardian (nothing, by default)."""

    def watch(self, lease: Lease, run_id: str, deadline_s: float) -> None:
        """The process now runs ``run_id`` under ``lease`` until ``deadline_s`` (Unix time)."""

    def clear(self, lease: Lease) -> None:
        """The process no longer holds ``lease``."""


class NoGuard:
    """No guardian: the lease keeper thread alone (in-process use, tests, solo pools)."""

    def watch(self, lease: Lease, run_id: str, deadline_s: float) -> None:
        return None

    def clear(self, lease: Lease) -> None:
        return None


class WatchRecord(pydantic.BaseModel):
    """One process's lease and deadline, as its guardian reads it (versioned JSON)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    v: int = WATCH_FORMAT_VERSION
    pid: int
    tenant: str
    session_id: str
    owner: str
    fence: int
    run_id: str
    deadline_s: float

    @property
    def lease(self) -> Lease:
        return Lease(self.tenant, self.session_id, self.owner, self.fence)


class FileGuard:
    """The run side: one watch record per process in ``directory``, replaced atomically."""

    def __init__(self, directory: Path) -> None:
        self._directory = Path(directory)

    def _path(self) -> Path:
        return self._directory / f"{os.getpid()}.json"

    def watch(self, lease: Lease, run_id: str, deadline_s: float) -> None:
        record = WatchRecord(
            pid=os.getpid(),
            tenant=lease.tenant,
            session_id=lease.session_id,
            owner=lease.owner,
            fence=lease.fence,
            run_id=run_id,
            deadline_s=deadline_s,
        )
        path = self._path()
        scratch = path.with_suffix(".tmp")
        try:
            scratch.write_text(record.model_dump_json())
            scratch.replace(path)
        except OSError as exc:  # the lease keeper still runs; a guardian is a second line
            log.warning("could not write the guardian's watch record %s: %s", path, exc)

    def clear(self, lease: Lease) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path().unlink()


def _cpu_state(pid: int) -> tuple[str, int] | None:
    """The process state letter and its CPU ticks so far (from /proc), or None when unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[11]) + int(fields[12])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Guardian:
    """The guardian side: renew the watched leases, kill processes past their deadline."""

    directory: Path
    leases: LeaseManager
    ttl_ms: int
    grace_s: float
    on_kill: Callable[[WatchRecord], None] = lambda record: None
    kill: Callable[[int], None] = field(default=lambda pid: os.kill(pid, signal.SIGKILL))
    clock: Callable[[], float] = time.time
    _stop: threading.Event = field(default_factory=threading.Event)
    _ticks: dict[int, int] = field(default_factory=dict)

    def sweep_once(self) -> dict[str, int]:
        """One pass over the records; counts of what it did, by kind."""
        done = {"renewed": 0, "killed": 0, "gone": 0}
        for path in sorted(self.directory.glob("*.json")):
            try:
                record = WatchRecord.model_validate_json(path.read_bytes())
            except (OSError, pydantic.ValidationError):
                continue  # being replaced, or not ours: the next pass sees it whole
            if record.pid == os.getpid() or not _alive(record.pid):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                self._ticks.pop(record.pid, None)  # pids are reused: forget its CPU reading
                done["gone"] += 1
            elif self.clock() > record.deadline_s + self.grace_s:
                self._kill(record, path)
                done["killed"] += 1
            elif self._computing(record.pid) and self._renew(record):
                done["renewed"] += 1
        return done

    def _computing(self, pid: int) -> bool:
        """Whether the process is busy on the CPU: the case its own heartbeat cannot cover. A
        stopped or frozen process (SIGSTOP, a pause) is not kept alive: its lease expires and
        another worker takes over, as it should. Without /proc, any live process counts."""
        state = _cpu_state(pid)
        if state is None:
            return True
        letter, ticks = state
        previous = self._ticks.get(pid)
        self._ticks[pid] = ticks
        if letter in "TtZX":
            return False
        return previous is None or ticks > previous

    def _renew(self, record: WatchRecord) -> bool:
        try:
            return self.leases.renew(record.lease, self.ttl_ms)
        except TetherError as exc:
            log.warning("guardian could not renew %s/%s: %s", record.tenant, record.session_id, exc)
            return False

    def _kill(self, record: WatchRecord, path: Path) -> None:
        log.error(
            "run %s of %s/%s is %.0f s past its deadline in process %d (a tool that never "
            "yields?): killing the process; the run is retried from its last commit",
            record.run_id,
            record.tenant,
            record.session_id,
            self.clock() - record.deadline_s,
            record.pid,
        )
        with contextlib.suppress(ProcessLookupError):
            self.kill(record.pid)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._ticks.pop(record.pid, None)
        try:
            self.on_kill(record)
        except TetherError as exc:
            log.warning("guardian could not note the kill of run %s: %s", record.run_id, exc)

    def start(self) -> threading.Thread:
        """Sweep every third of the lease TTL in a daemon thread until :meth:`stop`."""
        interval_s = self.ttl_ms / 3000

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.sweep_once()
                except Exception:  # never let one bad pass end the guardian
                    log.exception("guardian pass failed")

        thread = threading.Thread(target=loop, name="tether-guardian", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """Stop sweeping."""
        self._stop.set()
