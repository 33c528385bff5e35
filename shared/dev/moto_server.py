"""A moto S3 server in its own process, for tests, benchmarks and local experiments.

A separate process matters: moto keeps its state per Python process, so an in-process server is
reset by any other in-process moto use, and it shares the GIL with the code being measured.
Requires the ``moto[server]`` extra (``make test`` installs it); nothing here imports moto.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tether.dev.redis_server import free_port
from tether.errors import ConfigurationError


def moto_binary() -> str:
    """The ``moto_server`` script of this interpreter's environment."""
    path = Path(sys.executable).parent / "moto_server"
    if not path.exists():
        raise ConfigurationError(
            f"moto_server not found next to {sys.executable}; install 'moto[server]' "
            "(make test does)"
        )
    return str(path)


class MotoServer:
    """``moto_server`` on a free loopback port; use as a context manager."""

    def __init__(self, log_dir: Path, *, start_timeout_s: float = 30.0) -> None:
        self.log_path = Path(log_dir) / "moto.log"
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoint = ""

    def start(self) -> MotoServer:
        """Spawn the server and wait until it answers."""
        port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [moto_binary(), "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ConfigurationError(
                    f"moto_server exited with {self.proc.returncode}; see {self.log_path}"
                )
            try:
                with urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1):
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.05)
        self.stop()
        raise ConfigurationError(f"moto_server did not answer on {self.endpoint}")

    def stop(self) -> None:
        """Stop the process group (SIGTERM, then SIGKILL)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
