"""A moto S3 server in its own process, for tests, benchmarks and local experiments.

A separate process matters: moto keeps its state per Python process, so an in-process server is
reset by any other in-process moto use, and it shares the GIL with the code being measured.
Requires the ``moto[server]`` extra (``make test`` installs it); nothing here imports moto.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tether.errors import ConfigurationError

#: The line werkzeug logs once it listens (ANSI colours around it vary by version).
_RUNNING_ON = re.compile(r"Running on http://127\.0\.0\.1:(\d+)")


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
        """Spawn the server on a port the kernel picks, and wait until it answers.

        The server binds port 0 itself and logs the port it got: a port picked here and passed
        on could be taken by another process in between (tests and benchmarks of several users
        start servers on this machine at once), and then the endpoint might even answer from
        that other process's server.
        """
        self.endpoint = ""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [moto_binary(), "-H", "127.0.0.1", "-p", "0"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},  # log lines arrive at once
            )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ConfigurationError(
                    f"moto_server exited with {self.proc.returncode}; see {self.log_path}"
                )
            if not self.endpoint:
                self.endpoint = self._logged_endpoint(offset)
            if self.endpoint:
                try:
                    with urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1):
                        return self
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
            time.sleep(0.05)
        self.stop()
        raise ConfigurationError(
            f"moto_server did not answer on {self.endpoint or 'its port'}; see {self.log_path}"
        )

    def _logged_endpoint(self, offset: int) -> str:
        """``http://127.0.0.1:<port>`` once this start's log names the port, else ''."""
        with self.log_path.open("rb") as log:
            log.seek(offset)
            found = _RUNNING_ON.search(log.read().decode(errors="replace"))
        return f"http://127.0.0.1:{found.group(1)}" if found else ""

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
