"""``tether up`` / ``status`` / ``down`` in a fresh project folder, as real processes.

The stack's redis-server is its own (a free port, never 6379); every command runs in the
project folder with no ``TETHER_*`` variable set, so it reaches the stack only through
``.tether/env``. After ``down``, none of the recorded processes (nor a worker's pool child)
may remain.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tether.producer.ops.local_stack import beat_available, console_available

CLI_TIMEOUT_S = 180


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "AWS_"))}


def tether(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.producer.ops.cli", *args],
        env=_env(),
        cwd=project,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"rc={done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def _alive(pid: int, create_time: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) < 0.05 and proc.status() != "zombie"
    except psutil.NoSuchProcess:
        return False


def test_up_run_status_down_leaves_nothing_behind(tmp_path: Path) -> None:
    started = time.monotonic()
    up = ok(tether(tmp_path, "up", "--workers", "1", "--console-actions"))
    up_s = time.monotonic() - started
    assert "local stack up" in up.stdout
    state = json.loads((tmp_path / ".tether" / "stack.json").read_text())
    services = {s["name"]: s for s in state["services"]}
    try:
        assert services["redis"]["port"] not in (None, 6379)
        expected = {"redis", "w1"} | ({"console"} if console_available() else set())
        assert set(services) == expected | ({"beat"} if beat_available() else set())
        assert beat_available()  # the dev install has the schedules extra
        env_file = tmp_path / ".tether" / "env"
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
        assert "export TETHER_BROKER_URL=" in env_file.read_text()
        password = env_file.read_text().split("redis://:", 1)[1].split("@", 1)[0]
        assert password and password not in up.stdout + up.stderr  # the output masks it
        for service in services.values():  # detached: each leads a session of its own
            assert os.getsid(service["pid"]) == service["pid"], service

        again = ok(tether(tmp_path, "up"))
        assert "already up" in again.stdout and "not applied" not in again.stderr
        more = ok(tether(tmp_path, "up", "--workers", "3"))  # kept its worker, silently
        assert "already up" in more.stdout and "were not applied" in more.stderr

        run = ok(tether(tmp_path, "run", "s1", "hi", "--agent", "echo"))
        assert run.stdout.strip() == "echo: hi"
        assert "no worker is consuming" not in run.stderr

        # the worker publishes its count of runs done with its presence heartbeat (every 2 s)
        deadline = time.monotonic() + 10
        while True:
            shown = json.loads(ok(tether(tmp_path, "status", "--json")).stdout)
            done = shown["workers"][0]["runs_done"] if shown["workers"] else 0
            if done >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert [w["pid"] for w in shown["workers"]] == [services["w1"]["pid"]]
        assert shown["workers"][0]["queues"] == ["tether"]
        assert shown["workers"][0]["runs_done"] >= 1
        assert shown["healthy"] and all(s["up"] for s in shown["services"])
        assert shown["queue_depth"] == {"tether": 0}
        text = ok(tether(tmp_path, "status")).stdout
        assert "workers: 1" in text and "w1@" in text
        _the_stacks_beat_fires_a_schedule(tmp_path, services["beat"]["pid"])
        if console_available():
            with urllib.request.urlopen(state["console_url"], timeout=10) as page:
                assert page.status == 200
                assert "actions on" in page.read().decode()  # --console-actions (#29 N4)
        family = {
            (p.pid, p.create_time())
            for s in services.values()
            for p in [psutil.Process(s["pid"]), *psutil.Process(s["pid"]).children(True)]
        }
        assert len(family) > len(services)  # the worker's pool child is tracked too
    finally:
        down = tether(tmp_path, "down")
    ok(down)
    assert "local stack down" in down.stdout
    remaining = [pid for pid, created in family if _alive(pid, created)]
    assert remaining == []
    assert not (tmp_path / ".tether" / "env").exists()
    assert not (tmp_path / ".tether" / "stack.json").exists()
    # no stack left and no setting: no silent fall-back to a Redis on 127.0.0.1:6379
    after = tether(tmp_path, "status")
    assert after.returncode == 2, after.stdout + after.stderr
    assert "no Redis configured" in after.stderr and "tether up" in after.stderr
    print(f"\ntether up with 1 worker took {up_s:.1f} s")


def _the_stacks_beat_fires_a_schedule(project: Path, beat_pid: int) -> None:
    """#50: `tether up` starts a beat; status shows it; a schedule added fires, unwarned."""
    shown = json.loads(ok(tether(project, "status", "--json")).stdout)
    assert [b["pid"] for b in shown["beats"]] == [beat_pid]
    added = ok(
        tether(project, "schedule", "add", "t", "--every-s", "1", "--session", "s2",
               "--agent", "echo", "--input", "tick")
    )  # fmt: skip
    assert "no beat is running" not in added.stderr
    deadline = time.monotonic() + 60
    while not json.loads(ok(tether(project, "schedule", "list", "--json")).stdout)[0][
        "last_run_id"
    ]:
        assert time.monotonic() < deadline, "the stack's beat fired no tick in 60 s"
        time.sleep(0.5)
    ok(tether(project, "schedule", "remove", "t"))
    text = ok(tether(project, "status")).stdout
    assert "beats: 1; firing the schedules: " in text


def test_up_s3_keeps_its_store_across_down_and_up(tmp_path: Path) -> None:
    """#50: moto keeps its objects in memory while Redis keeps the run records on disk: after
    `down` / `up --s3` the session was gone (`sessions show`: not found) while `tether wait`
    printed the old answer, and the next run remembered nothing."""
    ok(tether(tmp_path, "up", "--s3", "--no-beat", "--no-console"))
    try:
        state = json.loads((tmp_path / ".tether" / "stack.json").read_text())
        assert {s["name"] for s in state["services"]} == {"redis", "s3", "w1"}  # --no-beat
        first = ok(tether(tmp_path, "submit", "s1", "remember the code is 42", "--agent", "notes"))
        run_id = first.stdout.split()[0]
        assert ok(tether(tmp_path, "wait", run_id)).stdout.strip() == "noted: the code is 42"
    finally:
        ok(tether(tmp_path, "down"))
    assert list((tmp_path / ".tether" / "s3" / "tether").rglob("head*"))  # saved by `down`
    up = ok(tether(tmp_path, "up", "--s3", "--no-beat", "--no-console"))
    try:
        assert "restored" in up.stdout
        assert ok(tether(tmp_path, "sessions", "show", "s1")).returncode == 0
        assert ok(tether(tmp_path, "wait", run_id)).stdout.strip() == "noted: the code is 42"
        recall = ok(tether(tmp_path, "run", "s1", "recall", "--agent", "notes"))
        assert "the code is 42" in recall.stdout
    finally:
        ok(tether(tmp_path, "down"))


def test_down_never_signals_a_process_it_did_not_start(tmp_path: Path) -> None:
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        created = psutil.Process(stranger.pid).create_time()
        record = {"name": "w1", "kind": "worker", "pid": stranger.pid, "log": "x", "port": None}
        state = {
            "project": str(tmp_path),
            "started_at_ms": 0,
            # the same pid, another start time: the recorded worker is gone, the pid reused
            "services": [{**record, "create_time": created - 100.0}],
        }
        (tmp_path / ".tether").mkdir()
        (tmp_path / ".tether" / "stack.json").write_text(json.dumps(state))
        (tmp_path / ".tether" / "env").write_text("export TETHER_QUEUE='gone'\n")
        down = ok(tether(tmp_path, "down"))
        assert "nothing was running" in down.stdout
        assert stranger.poll() is None  # untouched
        assert not (tmp_path / ".tether" / "env").exists()
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.slow  # ~20 s of worker starts and stops; the supervisor itself runs in make test
def test_up_autoscale_runs_the_supervisor_and_down_stops_its_workers(tmp_path: Path) -> None:
    """``tether up --autoscale 1:2``: the supervisor is a service of the stack and starts the
    minimum at once; ``status --json`` shows its worker and the fleet signals; ``down`` leaves
    neither the supervisor nor any worker it started."""
    bad = tether(tmp_path, "up", "--autoscale", "3:1")
    assert bad.returncode == 2 and "MIN:MAX" in bad.stderr, bad.stderr
    assert not (tmp_path / ".tether" / "stack.json").exists()  # nothing started
    ok(tether(tmp_path, "up", "--autoscale", "1:2", "--no-console", "--no-beat"))
    state = json.loads((tmp_path / ".tether" / "stack.json").read_text())
    services = {s["name"]: s for s in state["services"]}
    family: set[tuple[int, float]] = set()
    try:
        assert set(services) == {"redis", "autoscaler"}
        shown = json.loads(ok(tether(tmp_path, "status", "--json")).stdout)
        assert len(shown["workers"]) == 1  # the minimum, up before `up` returned
        assert shown["fleet"]["workers"] == 1 and shown["fleet"]["slots"] == 1
        assert shown["fleet"]["queued"] == {"tether": 0}
        assert shown["fleet"]["oldest_queued_age_s"] == {}
        supervisor = psutil.Process(services["autoscaler"]["pid"])
        family = {(p.pid, p.create_time()) for p in [supervisor, *supervisor.children(True)]}
        assert len(family) >= 3  # the supervisor, its worker and the worker's pool child
        run = ok(tether(tmp_path, "run", "s1", "hi", "--agent", "echo"))
        assert run.stdout.strip() == "echo: hi"
    finally:
        down = tether(tmp_path, "down")
    ok(down)
    assert "autoscaler" in down.stdout
    assert [pid for pid, created in family if _alive(pid, created)] == []
