"""A service that does not answer is named, with its setting, and never passes for success:
with only the broker down, ``tether status`` exited 0 and a submission failed with kombu's
``OperationalError: Error 111 ...`` naming no setting; ``tether batch`` with Redis down took 11 s
and left an empty results file. Each command runs in this process (``run_cli``, as the console
script runs it) against a private redis-server; a service that is "down" is a closed port of
127.0.0.1."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tether.dev.redis_server import free_port
from tether.producer import Producer
from tether.producer.ops.cli import run_cli
from tether.settings import Settings


def _down() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


Tether = Callable[..., Done]


@pytest.fixture
def tether(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Tether:
    """``tether(cwd, env, *args)``: the command in ``cwd`` with only ``env`` of TETHER_*."""

    def run(cwd: Path, env: dict[str, str], *args: str) -> Done:
        for name in list(os.environ):
            if name.startswith("TETHER_"):
                monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        code = run_cli(list(args))
        out = capsys.readouterr()
        return Done(code, out.out, out.err)

    return run


def test_status_exits_4_when_only_the_broker_is_down(
    tether: Tether, redis_url: str, tmp_path: Path
) -> None:
    broker = _down()
    env = {"TETHER_REDIS_URL": redis_url, "TETHER_BROKER_URL": broker}
    shown = tether(tmp_path, env, "status", "--json")
    assert shown.returncode == 4, shown.stdout + shown.stderr
    status = json.loads(shown.stdout)
    assert status["error"] is None and not status["healthy"]  # Redis answered
    assert f"the broker at TETHER_BROKER_URL={broker} did not answer" in status["broker_error"]
    text = tether(tmp_path, env, "status")
    assert text.returncode == 4 and "broker unreachable" in text.stdout


def test_a_submission_to_a_broker_that_is_down_names_the_broker_setting(
    tether: Tether, redis_url: str, tmp_path: Path
) -> None:
    from tether.errors import BrokerUnavailable

    broker = _down()
    producer = Producer(Settings(redis_url=redis_url, broker_url=broker))
    try:
        with pytest.raises(BrokerUnavailable, match=f"TETHER_BROKER_URL={broker}"):
            producer.run_async("s-1", "hi", agent="echo")
    finally:
        producer.close()
    env = {"TETHER_REDIS_URL": redis_url, "TETHER_BROKER_URL": broker}
    done = tether(tmp_path, env, "submit", "s-2", "hi", "--agent", "echo")
    assert done.returncode == 4, done.stderr
    assert done.stderr.startswith("error: BrokerUnavailable: the broker at TETHER_BROKER_URL=")


def test_a_batch_with_redis_down_fails_at_once_naming_it_and_writes_no_results(
    tether: Tether, tmp_path: Path
) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"id": "a", "input": "x"}\n{"id": "b", "input": "y"}\n')
    redis = _down()
    started = time.monotonic()
    done = tether(tmp_path, {"TETHER_REDIS_URL": redis}, "batch", str(cases), "--agent", "echo")
    took_s = time.monotonic() - started
    assert done.returncode == 4, done.stdout + done.stderr
    assert f"Redis at TETHER_REDIS_URL={redis} did not answer" in done.stderr
    assert not (tmp_path / "cases.results.jsonl").exists()
    print(f"\na batch with Redis down ended in {took_s:.1f} s")  # 11 s before, one attempt now


def test_a_file_store_that_does_not_exist_is_named_not_shown_empty(
    tether: Tether, tmp_path: Path
) -> None:
    """`tether sessions list` on a typo'd file:// store showed "0 sessions"; workers still
    create the directory on their first write."""
    missing = tmp_path / "no-such-store"
    env = {"TETHER_REDIS_URL": _down(), "TETHER_STORE_URL": f"file://{missing}"}
    for args in (["sessions", "list"], ["sessions", "show", "s-1"], ["sessions", "verify"]):
        done = tether(tmp_path, env, *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr.startswith(
            f"error: StoreNotConfigured: TETHER_STORE_URL=file://{missing}: no such directory"
        ), done.stderr
        assert not missing.exists()
    missing.mkdir()  # an existing, empty store is simply empty
    listed = tether(tmp_path, env, "sessions", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["sessions"] == [], listed.stderr


def test_a_service_that_never_answers_is_named_while_the_command_waits(
    tether: Tether, tmp_path: Path
) -> None:
    """A Redis that takes connections and never answers (a hung server, an address that drops
    packets): `tether wait` sat silent through the client's retries (4 x 10 s); it says what it
    waits for within seconds, then fails naming the setting (exit 4)."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes connections; nobody reads or answers
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        started = time.monotonic()
        done = tether(tmp_path, {"TETHER_REDIS_URL": url}, "wait", "r-1")
        took_s = time.monotonic() - started
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 4, done.stderr
    assert lines[0].startswith(f"warning: waiting for Redis at TETHER_REDIS_URL={url} to answer")
    assert lines[-1].startswith(f"error: StreamUnavailable: Redis at TETHER_REDIS_URL={url} did ")
    assert "TimeoutError" in lines[-1]
    print(f"\na silent Redis was named and given up on in {took_s:.1f} s")
