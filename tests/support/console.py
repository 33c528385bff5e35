"""A real ``tether console`` process for tests, and headless Chromium from Debian's package.

The console runs as ``python -m tether.producer.ops.cli console`` in its own process group (the
same entry point as ``tether console``) with the test stack's environment; :class:`Console`
waits until ``/healthz`` answers and stops the whole group afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from tether.dev.redis_server import free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CHROMIUM_MISSING = (
    f"{CHROMIUM} is missing: the console's browser tests drive Debian's Chromium; install it "
    "with `apt-get install -y chromium` (never `playwright install`)"
)


class Console:
    """One ``tether console`` process.

    Args:
        env: its environment (the stack's ``TETHER_*`` settings).
        log_dir: where its log goes.
        args: extra arguments (``--actions``, ``--token ...``, ``--tenant ...``).
    """

    def __init__(self, env: Mapping[str, str], log_dir: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_dir) / f"console-{self.port}.log"
        self._env = dict(env)
        self._args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """The command line."""
        argv = [sys.executable, "-m", "tether.producer.ops.cli", "console"]
        argv += ["--port", str(self.port)]
        return argv + self._args

    def start(self, timeout_s: float = 30.0) -> Console:
        """Start it and wait until it answers."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                env=self._env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"console exited with {self.proc.returncode}: {self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code in (200, 401):
                    return self
            time.sleep(0.1)
        raise RuntimeError(f"console not answering after {timeout_s} s: {self.log()}")

    def log(self) -> str:
        """Its log so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        """SIGTERM, then SIGKILL the whole group after 10 s."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def __enter__(self) -> Console:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
