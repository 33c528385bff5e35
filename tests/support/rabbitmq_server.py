"""A private RabbitMQ node for tests: own ports, own data directory, stopped afterwards.

``rabbitmq-server`` drops to the ``rabbitmq`` user when started as root, so the data directory is
handed to that user. The node needs no plugins and allows ``guest`` over loopback only.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.dev.redis_server import free_port


def _wait_port(port: int, timeout_s: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    raise RuntimeError(
        f"private RabbitMQ did not listen on {port}; log:\n{log.read_text()[-2000:]}"
    )


@pytest.fixture(scope="session")
def rabbitmq_url() -> Iterator[str]:
    """An AMQP URL of a private RabbitMQ node (fails clearly when RabbitMQ is not installed)."""
    binary = shutil.which("rabbitmq-server") or (
        "/usr/sbin/rabbitmq-server" if os.path.exists("/usr/sbin/rabbitmq-server") else None
    )
    if binary is None:
        pytest.fail(
            "rabbitmq-server is not installed; `apt-get install rabbitmq-server` to run "
            "the RabbitMQ broker tests"
        )
    # not under pytest's tmp dirs: they are 0700 root and the node runs as user rabbitmq
    base = Path(tempfile.mkdtemp(prefix="tether-rabbitmq-"))
    port, dist_port = free_port(), free_port()
    (base / "enabled_plugins").write_text("[].\n")
    (base / "rabbitmq.conf").write_text(
        f"listeners.tcp.default = 127.0.0.1:{port}\nloopback_users.guest = false\n"
    )
    for sub in ("mnesia", "log"):
        (base / sub).mkdir()
    if os.geteuid() == 0:
        user = pwd.getpwnam("rabbitmq")
        for path in [base, *base.rglob("*")]:
            os.chown(path, user.pw_uid, user.pw_gid)
    node = f"tether{port}@localhost"
    env = dict(os.environ)
    env.update(
        {
            "RABBITMQ_NODENAME": node,
            "RABBITMQ_NODE_PORT": str(port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),
            "RABBITMQ_PID_FILE": str(base / "pid"),
            "RABBITMQ_FEATURE_FLAGS_FILE": str(base / "feature_flags"),
        }
    )
    log = base / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        _wait_port(port, 60, proc, log)
        yield f"amqp://guest:guest@127.0.0.1:{port}//"
    finally:
        _kill_node(proc, node)
        shutil.rmtree(base, ignore_errors=True)


def _node_pids(node: str) -> list[int]:
    """Processes started for ``node`` (the start script switches user and session, so the
    node's process group is not ours; its environment still names the node)."""
    marker = f"RABBITMQ_NODENAME={node}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _kill_node(proc: subprocess.Popen[bytes], node: str) -> None:
    for pid in [proc.pid, *_node_pids(node)]:
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, signal.SIGKILL)
    proc.wait(timeout=10)
