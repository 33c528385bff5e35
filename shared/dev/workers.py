"""Start, kill and stop real Celery worker processes (embedded default, tests, benchmarks).

Each worker runs ``python -m celery -A tether.worker.app worker`` in its own process group, so
killing
the group takes its pool children with it, and stopping never leaves an orphan.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from tether.errors import ConfigurationError

READY_MARK = "ready."


class WorkerProcess:
    """One Celery worker process group.

    Args:
        name: the worker's node name prefix (``<name>@<host>``).
        env: the environment (``TETHER_*`` settings and AWS variables).
        log_dir: where its log file goes.
        concurrency: pool processes or threads.
        pool: ``prefork``, ``threads`` or ``solo``.
        queue: the queue to consume.
        die_with_parent: the worker is sent SIGTERM (a warm shutdown) when the process that
            started it dies (Linux; an autoscaling supervisor killed with SIGKILL left its workers
            running, and ``tether down`` then stopped none of them). Off for detached services
            (``tether up``'s workers outlive the command that started them).
    """

    #: What the log shows once the process is ready (a subclass runs another command).
    ready_mark = READY_MARK

    def __init__(
        self,
        name: str,
        env: Mapping[str, str],
        log_dir: Path,
        *,
        concurrency: int = 1,
        pool: str = "prefork",
        queue: str = "tether",
        die_with_parent: bool = False,
    ) -> None:
        self.name = name
        self.die_with_parent = die_with_parent
        self.env = dict(env)
        self.log_path = Path(log_dir) / f"{name}.log"
        self.concurrency = concurrency
        self.pool = pool
        self.queue = queue
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    @property
    def pid(self) -> int | None:
        """The main process id while running."""
        return self.proc.pid if self.proc is not None else None

    def command(self) -> list[str]:
        """The command line."""
        return [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tether.worker.app",
            "worker",
            "-P",
            self.pool,
            "-c",
            str(self.concurrency),
            "-n",
            f"{self.name}@%h",
            "-Q",
            self.queue,
            "--without-mingle",
            "--without-gossip",
            "-l",
            "INFO",
        ]

    def start(self, *, wait: bool = True, timeout_s: float = 60.0) -> WorkerProcess:
        """Spawn the worker (and wait until it consumes, by default)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                self.command(),
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_parent_death_signal() if self.die_with_parent else None,
            )
        finally:
            log.close()
        if wait:
            self.wait_ready(timeout_s)
        return self

    def log_text(self) -> str:
        """This start's part of the log."""
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as handle:
            handle.seek(self._log_offset)
            return handle.read().decode(errors="replace")

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Block until the worker logged that it is ready."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.ready_mark in self.log_text():
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise ConfigurationError(
                    f"worker {self.name} exited with {self.proc.returncode} during start; "
                    f"log {self.log_path}:\n{self.log_text()[-3000:]}"
                )
            time.sleep(0.05)
        raise ConfigurationError(
            f"worker {self.name} not ready after {timeout_s} s; log {self.log_path}:\n"
            f"{self.log_text()[-3000:]}"
        )

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the whole process group."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the process group (a crash) and reap it."""
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 15.0) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL after ``timeout_s``; never leaves orphans."""
        if self.proc is None:
            return
        self.signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout_s)
        # pool children may outlive a main process that exited: clear the whole group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)

    def alive(self) -> bool:
        """True while the main process runs."""
        return self.proc is not None and self.proc.poll() is None


class WorkerFleet:
    """Several :class:`WorkerProcess` sharing one environment."""

    def __init__(
        self,
        env: Mapping[str, str],
        log_dir: Path,
        *,
        count: int = 2,
        concurrency: int = 1,
        pool: str = "prefork",
        queue: str = "tether",
        prefix: str = "w",
    ) -> None:
        self.workers = [
            WorkerProcess(
                f"{prefix}{i + 1}", env, log_dir, concurrency=concurrency, pool=pool, queue=queue
            )
            for i in range(count)
        ]

    def start(self, timeout_s: float = 90.0) -> WorkerFleet:
        """Start every worker, then wait for all (they boot in parallel)."""
        for worker in self.workers:
            worker.start(wait=False)
        for worker in self.workers:
            worker.wait_ready(timeout_s)
        return self

    def stop(self) -> None:
        """Stop every worker."""
        for worker in self.workers:
            worker.signal(signal.SIGTERM)
        for worker in self.workers:
            worker.stop()

    def __enter__(self) -> WorkerFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to send the child SIGTERM when its parent dies
    (``prctl(PR_SET_PDEATHSIG)``); None elsewhere. The C function is looked up here, in the
    parent, so the child between fork and exec only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    set_pdeathsig = 1  # PR_SET_PDEATHSIG, <linux/prctl.h>

    def arm() -> None:
        prctl(set_pdeathsig, signal.SIGTERM, 0, 0, 0)

    return arm
