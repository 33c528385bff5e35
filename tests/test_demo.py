"""`tether demo` end to end: the embedded default, every check passing, and no orphans ever.

Each demo runs with a unique marker variable in its environment and its own ``TMPDIR``. The
workers and their pool children inherit that environment; redis-server overwrites its environment
block with its process title, but it runs with its working directory inside ``TMPDIR``. Scanning
``/proc`` for either finds them wherever they were reparented after the demo exited.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.support.stack import Stack, eventually

DEMO_TIMEOUT_S = 180
MIN_CHECKS = 8


def tether_argv() -> list[str]:
    script = Path(sys.executable).parent / "tether"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tether.producer.ops.cli"]


def _clean_env(tmp_path: Path, marker: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "AWS_"))}
    # The marker must not start with TETHER_: unknown TETHER_* variables are refused.
    env.update({"PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp_dir(tmp_path)), "DEMO_MARKER": marker})
    return env


def tmp_dir(tmp_path: Path) -> Path:
    path = tmp_path / "tmp"
    path.mkdir(exist_ok=True)
    return path


def _belongs(pid: str, needle: bytes, tmp: str) -> bool:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        if needle in handle.read().split(b"\0"):
            return True
    return os.readlink(f"/proc/{pid}/cwd").startswith(tmp)


def processes_with(marker: str, tmp: Path) -> list[tuple[int, str]]:
    """(pid, command line) of live processes with ``marker`` in their environment or their
    working directory under ``tmp``."""
    needle = f"DEMO_MARKER={marker}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            if not _belongs(name, needle, str(tmp)):
                continue
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmd = handle.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # a zombie holds no resources; its parent has gone
        except OSError:
            continue
        found.append((int(name), cmd))
    return found


def assert_no_orphans(marker: str, tmp: Path) -> None:
    left: list[tuple[int, str]] = []

    def none_left() -> bool:
        left[:] = processes_with(marker, tmp)
        return not left

    try:
        eventually(none_left, timeout_s=5)
    except AssertionError:
        raise AssertionError(f"processes left behind by the demo: {left}") from None


def stop_gracefully(proc: subprocess.Popen[str]) -> None:
    """End a demo the way a user would (SIGTERM), so a failing test leaves no orphans either;
    SIGKILL only if it does not stop."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_demo(env: dict[str, str], cwd: Path, directory: Path) -> subprocess.CompletedProcess[str]:
    """``tether demo --dir directory`` to completion (stopped gracefully on timeout)."""
    proc = subprocess.Popen(
        [*tether_argv(), "demo", "--dir", str(directory)],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=DEMO_TIMEOUT_S)
    finally:
        stop_gracefully(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def check_lines(stdout: str) -> tuple[list[str], list[str]]:
    lines = [line.strip() for line in stdout.splitlines()]
    passed = [line for line in lines if line.startswith("PASS")]
    return passed, [line for line in lines if line.startswith("FAIL")]


def test_demo_on_the_embedded_default_passes_and_leaves_nothing(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    env = _clean_env(tmp_path, marker)
    started = time.monotonic()
    result = run_demo(env, tmp_path, tmp_path / "demo")
    elapsed_s = time.monotonic() - started
    print(f"\ntether demo took {elapsed_s:.1f} s")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    passed, failed = check_lines(result.stdout)
    assert not failed, failed
    assert len(passed) >= MIN_CHECKS, result.stdout
    assert "demo PASSED" in result.stdout
    assert "turns landed on both workers" in result.stdout
    assert "Traceback" not in result.stderr
    assert (tmp_path / "demo" / "store").is_dir()
    assert_no_orphans(marker, tmp_dir(tmp_path))


def test_sigint_mid_demo_stops_everything(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    proc = subprocess.Popen(
        [*tether_argv(), "demo", "--dir", str(tmp_path / "demo")],
        env=_clean_env(tmp_path, marker),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("workers ready"):
                break
        assert seen and seen[-1].startswith("workers ready"), "".join(seen)
        # The scan can see what it must later not find: redis-server and two workers at least.
        running = processes_with(marker, tmp_dir(tmp_path))
        commands = " ".join(cmd for _pid, cmd in running)
        assert "redis-server" in commands and commands.count("celery") >= 2, running
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        stop_gracefully(proc)
    assert proc.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr, stderr
    assert "interrupted by SIGINT" in stdout
    assert "demo PASSED" not in stdout
    assert_no_orphans(marker, tmp_dir(tmp_path))


def test_demo_uses_configured_redis_and_s3(live_stack: Stack, tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    env = {**live_stack.env, "DEMO_MARKER": marker, "TMPDIR": str(tmp_dir(tmp_path))}
    result = run_demo(env, tmp_path, tmp_path / "demo")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "the configured Redis, the configured store, 2 worker processes" in result.stdout
    assert "demo PASSED" in result.stdout
    assert not (tmp_path / "demo" / "store").exists()  # nothing went to the local store
    demo_keys = [k for k in live_stack.s3_keys() if "/demo-" in k]
    assert demo_keys, "the demo's sessions are not in the configured bucket"
    assert_no_orphans(marker, tmp_dir(tmp_path))
