"""Detached service processes of the local stack, known by pid *and* start time.

``tether up`` starts every service in a session of its own (no controlling terminal, so closing
the terminal sends it no SIGHUP), with stdin from ``/dev/null`` and its output in a log file,
and records each one as a :class:`ProcessRecord`: pid plus the process's start time. ``tether
down`` signals a record only while a process with that pid *and* that start time exists, so a
pid the system reused for something else is never touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil
import redis
from pydantic import BaseModel, ConfigDict

from tether.dev.redis_server import find_redis_server_binary, free_port
from tether.errors import ConfigurationError, TetherError
from tether.persistence.redis_conn import redis_from_url
from tether.settings import Settings

#: Start times are floats derived from clock ticks; equal processes agree far closer than this.
_START_TIME_TOLERANCE_S = 0.05
_PORT_ATTEMPTS = 5
_NOT_YET = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


class ProcessRecord(BaseModel):
    """One process ``tether up`` started."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: str
    pid: int
    create_time: float
    log: str
    port: int | None = None


def _process(record: ProcessRecord) -> psutil.Process | None:
    """The live process of ``record`` (same pid and start time), else None."""
    try:
        proc = psutil.Process(record.pid)
        if abs(proc.create_time() - record.create_time) > _START_TIME_TOLERANCE_S:
            return None  # the pid was reused by another process
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def is_running(record: ProcessRecord) -> bool:
    """Whether the recorded process still runs (same pid and start time)."""
    return _process(record) is not None


def spawn(
    name: str,
    kind: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log_path: Path,
    cwd: Path,
    port: int | None = None,
) -> ProcessRecord:
    """Start ``argv`` detached (new session, stdin ``/dev/null``, output appended to
    ``log_path``) and record it."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return record_of(name, kind, proc.pid, log_path, port=port)


def record_of(
    name: str, kind: str, pid: int, log_path: Path, *, port: int | None = None
) -> ProcessRecord:
    """The record of a process started elsewhere (e.g. by :class:`WorkerProcess`)."""
    return ProcessRecord(
        name=name,
        kind=kind,
        pid=pid,
        create_time=psutil.Process(pid).create_time(),
        log=str(log_path),
        port=port,
    )


def stop(record: ProcessRecord, *, timeout_s: float) -> bool:
    """Stop one recorded process (see :func:`stop_all`); False when it was already gone."""
    return bool(stop_all([record], timeout_s=timeout_s))


def stop_all(records: Sequence[ProcessRecord], *, timeout_s: float) -> list[ProcessRecord]:
    """SIGTERM the recorded processes at once, give them ``timeout_s`` to exit (a worker's warm
    shutdown stops its own pool), then SIGKILL whatever of them or their children is left.

    Returns the records that were running (and so were stopped); the others are not touched.
    """
    live = [(r, p) for r in records if (p := _process(r)) is not None]
    family: list[psutil.Process] = []
    for _, proc in live:
        family.append(proc)
        with contextlib.suppress(psutil.Error):
            family += proc.children(recursive=True)  # pool children, a BGSAVE fork
    for _, proc in live:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGTERM)
    _wait_gone([p for _, p in live], timeout_s)
    for member in _wait_gone(family, 1.0):
        with contextlib.suppress(psutil.Error):
            member.kill()  # psutil checks the start time: a reused pid is not signalled
    _wait_gone(family, 5.0)
    return [r for r, _ in live]


def _gone(proc: psutil.Process) -> bool:
    try:
        # a zombie has exited; its parent (not us: we exited after `up`) reaps it in its time
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(procs: Sequence[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait until every process has exited or ``timeout_s`` passed; returns those left."""
    deadline = time.monotonic() + timeout_s
    left = [p for p in procs if not _gone(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if not _gone(p)]
    return left


def log_tail(path: str | Path, max_chars: int = 2000) -> str:
    """The end of a log file (empty when missing)."""
    try:
        return Path(path).read_text(errors="replace")[-max_chars:]
    except OSError:
        return ""


def wait_for_port(record: ProcessRecord, port: int, timeout_s: float) -> None:
    """Block until the record's process listens on ``127.0.0.1:port`` (its own socket: another
    process that holds the port, such as a second stack's console, does not count).

    Raises:
        ConfigurationError: the process exited or did not listen in time (with its log's end).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_running(record):
            raise ConfigurationError(
                f"{record.name} exited during start; its log {record.log} ends with:\n"
                + log_tail(record.log)
            )
        if _listens(record, port):
            return
        time.sleep(0.1)
    raise ConfigurationError(
        f"{record.name} did not listen on 127.0.0.1:{port} within {timeout_s:.0f} s; see "
        f"{record.log}"
    )


def _listens(record: ProcessRecord, port: int) -> bool:
    """Whether the record's process (or a child of it) has a listening socket on ``port``."""
    proc = _process(record)
    if proc is None:
        return False
    with contextlib.suppress(psutil.Error):
        for p in (proc, *proc.children(recursive=True)):
            for conn in p.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                    return True
    return False


def wait_for_workers(
    record: ProcessRecord, redis_url: str, settings: Settings, count: int, timeout_s: float
) -> None:
    """Block until ``count`` workers consume the settings' queue (their presence records),
    while ``record`` (the process that starts them) runs.

    Raises:
        ConfigurationError: the process exited, or the workers did not come in time.
    """
    from tether.keys import RedisKeys
    from tether.runs.presence import workers_for_queue

    client = redis_from_url(redis_url, retry=None)
    keys = RedisKeys(settings.namespace)
    deadline = time.monotonic() + timeout_s
    try:
        while len(workers_for_queue(client, keys, settings.queue)) < count:
            if not is_running(record):
                raise ConfigurationError(
                    f"{record.name} exited during start; its log {record.log} ends with:\n"
                    + log_tail(record.log)
                )
            if time.monotonic() > deadline:
                raise ConfigurationError(
                    f"{record.name} did not start {count} worker(s) within {timeout_s:.0f} s; "
                    f"see {record.log}"
                )
            time.sleep(0.1)
    finally:
        client.close()


def wait_for_beat(record: ProcessRecord, url: str, settings: Settings, timeout_s: float) -> None:
    """Block until the beat's presence record is in Redis (it fires schedules from then on).

    Raises:
        ConfigurationError: it exited, or wrote no record in time (with its log's end).
    """
    from tether.keys import RedisKeys
    from tether.persistence.redis_conn import redis_from_url
    from tether.producer.schedules.presence import list_beats

    client = redis_from_url(url, retry=None)
    deadline = time.monotonic() + timeout_s
    try:
        while is_running(record) and time.monotonic() < deadline:
            with contextlib.suppress(TetherError):
                if list_beats(client, RedisKeys(settings.namespace)):
                    return
            time.sleep(0.1)
    finally:
        client.close()
    raise ConfigurationError(
        f"the beat did not start within {timeout_s:.0f} s; its log {record.log} ends with:\n"
        + log_tail(record.log)
    )


# --- the stack's redis-server --------------------------------------------------------------------


def _redis_config(workdir: Path, log_path: Path, port: int, password: str) -> Path:
    lines = [
        "bind 127.0.0.1",
        f"port {port}",
        "daemonize no",
        f'dir "{workdir}"',
        f'logfile "{log_path}"',
        # the broker: queued runs survive `tether down` / `tether up`
        "appendonly yes",
        'save ""',
        f'requirepass "{password}"',
    ]
    path = workdir / "redis.conf"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the password
    with os.fdopen(fd, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


def start_redis(
    workdir: Path, log_path: Path, *, password: str, env: Mapping[str, str], timeout_s: float = 15
) -> tuple[ProcessRecord, str]:
    """A detached, password-protected ``redis-server`` on a free loopback port whose data lives
    in ``workdir``; returns its record and URL (with the password).

    Raises:
        ConfigurationError: no binary, or it did not answer PING (with its log's end).
    """
    binary = find_redis_server_binary()
    workdir.mkdir(parents=True, exist_ok=True)
    os.chmod(workdir, 0o700)
    out_path = log_path.with_suffix(".out")  # what it says before its log file is open
    for _ in range(_PORT_ATTEMPTS):
        port = free_port()
        config = _redis_config(workdir, log_path, port, password)
        argv = [binary, str(config)]
        record = spawn("redis", "redis", argv, env=env, log_path=out_path, cwd=workdir, port=port)
        record = record.model_copy(update={"log": str(log_path)})
        url = f"redis://:{password}@127.0.0.1:{port}/0"
        if _answers(record, url, timeout_s):
            return record, url
        stop(record, timeout_s=5)
        if "Address already in use" not in log_tail(log_path) + log_tail(out_path):
            break  # only a port taken meanwhile is worth another try
    raise ConfigurationError(
        f"redis-server {binary!r} did not start; its log {log_path} ends with:\n"
        + log_tail(log_path)
        + log_tail(out_path)
    )


def _answers(record: ProcessRecord, url: str, timeout_s: float) -> bool:
    probe = redis_from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0, retry=None)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and is_running(record):
            with contextlib.suppress(*_NOT_YET):
                if probe.ping():
                    return True
            time.sleep(0.05)
        return False
    finally:
        probe.close()
