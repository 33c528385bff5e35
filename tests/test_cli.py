"""The `tether` CLI against the private test stack.

Each command family keeps real subprocesses where a process is what is tested (the console
script, exit codes, Ctrl-C, one line on a real stderr, stdin that is no terminal, secrets in
the output); the other commands run in this process (``cli``: ``run_cli``, as the console script
runs it), which spares the second of imports each subprocess pays."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import pytest
import redis

from tests.support.cli_in_process import Done, InProcessCli
from tests.support.stack import Stack, eventually, unique
from tether.runs.leases.redis import RedisLeaseManager

CLI_TIMEOUT_S = 90


def tether_argv() -> list[str]:
    """The installed console script, else the module."""
    script = Path(sys.executable).parent / "tether"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tether.producer.ops.cli"]


def tether(
    env: dict[str, str],
    *args: str,
    extra_env: dict[str, str] | None = None,
    stdin: int | None = None,
) -> subprocess.CompletedProcess[str]:
    full_env = {**env, **(extra_env or {})}
    return subprocess.run(
        [*tether_argv(), *args],
        env=full_env,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def parallel(
    env: dict[str, str], *commands: Sequence[str], extra_env: dict[str, str] | None = None
) -> list[subprocess.CompletedProcess[str]]:
    """Run independent commands at once (each CLI start costs about a second of imports)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(commands)) as pool:
        futures = [pool.submit(tether, env, *cmd, extra_env=extra_env) for cmd in commands]
        return [f.result() for f in futures]


Outcome = subprocess.CompletedProcess[str] | Done
Out = TypeVar("Out", subprocess.CompletedProcess[str], Done)


def ok(result: Out) -> Out:
    assert result.returncode == 0, f"rc={result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def one_error_line(result: Outcome, *needles: str) -> str:
    """The command failed with exactly one line on stderr, no traceback, naming each needle."""
    assert result.returncode != 0, result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


class LineReader:
    """Collect a subprocess's stdout lines in a thread (so a test can wait for one)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        self._stdout = proc.stdout
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stdout:
            self.lines.append(line.rstrip("\n"))

    def join(self) -> list[str]:
        self._thread.join(timeout=30)
        return self.lines


def spawn(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*tether_argv(), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def final_outputs(lines: Sequence[str]) -> dict[str, str]:
    events = [json.loads(line) for line in lines]
    return {e["run_id"]: e["payload"]["text"] for e in events if e["type"] == "FINAL_OUTPUT"}


# --- runs ---------------------------------------------------------------------------------------


def test_run_prints_the_answer_and_status(live_stack: Stack) -> None:
    sid = unique("cli-run")
    good, bad = parallel(
        live_stack.env,
        ["run", sid, "hello there", "--agent", "echo"],
        ["run", sid, "hi", "--agent", "no-such-agent"],
    )
    assert ok(good).stdout == "echo: hello there\n"
    assert "COMPLETED" in good.stderr
    assert bad.returncode == 2
    one_error_line(bad, "UnknownAgent", "no-such-agent")


def test_submit_then_wait_with_json(live_stack: Stack, cli: InProcessCli) -> None:
    notes, echo = unique("cli-submit"), unique("cli-submit")
    env = live_stack.env
    plain = cli(env, "submit", notes, "remember tea", "--agent", "notes")
    as_json = cli(env, "submit", echo, "ping", "--agent", "echo", "--json")
    unknown = cli(env, "wait", "run-does-not-exist")
    run_id = ok(plain).stdout.strip()
    assert run_id.startswith("run-") and "\n" not in run_id
    submitted = json.loads(ok(as_json).stdout)
    assert submitted["session_id"] == echo
    assert unknown.returncode == 2
    one_error_line(unknown, "run-does-not-exist")
    waited_json = cli(env, "wait", run_id, "--json")
    waited_text = cli(env, "wait", submitted["run_id"])
    waited = json.loads(ok(waited_json).stdout)
    assert (waited["run_id"], waited["status"], waited["output"]) == (
        run_id,
        "COMPLETED",
        "noted: tea",
    )
    assert ok(waited_text).stdout == "echo: ping\n"


def test_cancel_a_queued_run(live_stack: Stack, cli: InProcessCli) -> None:
    sid = unique("cli-cancel")
    # Hold the session's lease ourselves: the run stays queued for as long as the test needs.
    leases = RedisLeaseManager(live_stack.redis.client(), keys=live_stack.producer.keys)
    lease = leases.acquire("default", sid, "test-holder", ttl_ms=120_000)
    assert lease is not None
    handle = live_stack.producer.run_async(sid, "remember never", agent="notes")
    try:
        cancelled = ok(cli(live_stack.env, "cancel", handle.run_id))
        assert f"run {handle.run_id} cancelled before it started" in cancelled.stdout
    finally:
        leases.release(lease)
    live_stack.producer.resubmit(handle.run_id)  # a worker takes the session now, skips the run
    waited = cli(live_stack.env, "wait", handle.run_id, "--wait-s", "60")
    assert waited.returncode == 1
    one_error_line(waited, handle.run_id, "cancelled")
    again = cli(live_stack.env, "cancel", handle.run_id, "--json")
    assert again.returncode == 1
    assert json.loads(again.stdout) == {
        "run_id": handle.run_id,
        "cancel_requested": False,
        "outcome": "finished",
        "status": "CANCELLED",
    }
    recall = live_stack.producer.run(sid, "recall", agent="notes", wait_s=60)
    assert recall.output == "(nothing remembered)"


# --- tail ---------------------------------------------------------------------------------------


def test_tail_sees_runs_submitted_by_another_process(live_stack: Stack, cli: InProcessCli) -> None:
    sid = unique("cli-tail")
    proc = spawn(live_stack.env, "tail", sid, "--json")
    reader = LineReader(proc)
    try:
        first = live_stack.producer.run(sid, "remember one", agent="notes", wait_s=60)
        eventually(lambda: first.run_id in final_outputs(reader.lines), timeout_s=60)
        # tail is now following live; the next run comes from `tether run` (in this process)
        second = json.loads(
            ok(cli(live_stack.env, "run", sid, "remember two", "--agent", "notes", "--json")).stdout
        )
        eventually(lambda: second["run_id"] in final_outputs(reader.lines), timeout_s=30)
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    assert code == 130, stderr
    assert "Traceback" not in stderr
    lines = reader.join()
    outputs = final_outputs(lines)
    assert outputs[first.run_id] == "noted: one"
    assert outputs[second["run_id"]] == "noted: two"
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, second["last_seq"] + 1))
    # --from-seq and --idle-timeout (for scripts): prints what is there, then exits 0
    replay = ok(cli(live_stack.env, "tail", sid, "--from-seq", "3", "--idle-timeout", "0.5"))
    shown = [line.split()[0] for line in replay.stdout.splitlines() if line.strip()]
    assert shown == [str(n) for n in range(3, second["last_seq"] + 1)]
    assert "noted: two" in replay.stdout
    assert "no event" not in replay.stderr
    # a mistyped session id exited 0 with nothing at all: a note says what may be wrong
    quiet = ok(cli(live_stack.env, "tail", sid + "-typo", "--idle-timeout", "0.5"))
    assert quiet.stdout == "" and f"no event of session default/{sid}-typo" in quiet.stderr
    assert "tether sessions list" in quiet.stderr


@pytest.fixture
def two_cpu_hogs() -> Iterator[None]:
    """Two busy processes beside the test (the machine has 2 cores): a loaded machine."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_ctrl_c_stops_a_tail_blocked_on_redis_at_once_on_a_loaded_machine(
    redis_client: redis.Redis, tmp_path: Path, two_cpu_hogs: None, inherited: str
) -> None:
    """SIGINT ends a `tether tail` that waits in XREAD BLOCK, exit 130, with the machine busy;
    also when it was started with SIGINT ignored (a shell's background job, a CI runner)."""
    url = redis_client.connection_pool.connection_kwargs
    redis_url = f"redis://{url['host']}:{url['port']}/0"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "AWS_"))}
    env.update(
        TETHER_REDIS_URL=redis_url,
        TETHER_BROKER_URL=redis_url,
        TETHER_STORE_URL=f"file://{tmp_path}/store",
    )

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    def blocked_in_xread() -> set[int]:
        clients = redis_client.client_list()
        return {int(c["id"]) for c in clients if c["cmd"] == "xread" and "b" in c["flags"]}

    earlier = blocked_in_xread()  # another test's reader may still be waiting on this server
    proc = subprocess.Popen(
        [*tether_argv(), "tail", unique("ctrl-c"), "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ignore_sigint if inherited == "ignored" else None,
    )
    try:
        # the CLI has started and waits on Redis
        eventually(lambda: blocked_in_xread() - earlier, timeout_s=60)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        code = proc.wait(timeout=10)
        took_s = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout, stderr = proc.communicate()
    assert code == 130, stderr
    assert "Traceback" not in stderr and stdout == ""
    print(f"tether tail exited {took_s:.2f} s after SIGINT")


# --- sessions -----------------------------------------------------------------------------------


def test_sessions_read_commands(live_stack: Stack, cli: InProcessCli) -> None:
    sid = unique("cli-sess")
    for fact in ("alpha", "beta"):
        live_stack.producer.run(sid, f"remember {fact}", agent="notes", wait_s=60)
    listed, shown, history, finals, by_text, memory, verified, table, bad_type = (
        cli(live_stack.env, *argv)
        for argv in (
            ["sessions", "list", "--json"],
            ["sessions", "show", sid, "--json"],
            ["sessions", "events", sid, "--json"],
            ["sessions", "search", sid, "--type", "final_output", "--json"],
            ["sessions", "search", sid, "--text", "BETA", "--json"],
            ["sessions", "project", sid, "--json"],
            ["sessions", "verify", sid],
            ["sessions", "events", sid, "--type", "USER_INPUT"],
            ["sessions", "events", sid, "--type", "NOPE"],
        )
    )
    listing = json.loads(ok(listed).stdout)
    assert sid in listing["sessions"] and listing["tenant"] == "default"
    head = json.loads(ok(shown).stdout)
    assert head["session_id"] == sid and head["last_seq"] > 0
    assert [r["output"] for r in head["applied_runs"]] == ["noted: alpha", "noted: beta"]
    events = json.loads(ok(history).stdout)
    assert [e["seq"] for e in events] == list(range(1, head["last_seq"] + 1))
    texts = [e["payload"]["text"] for e in json.loads(ok(finals).stdout)]
    assert texts == ["noted: alpha", "noted: beta"]
    matches = json.loads(ok(by_text).stdout)
    assert matches and all("beta" in json.dumps(e) for e in matches)
    items = json.loads(ok(memory).stdout)["items"]
    assert [i["content"] for i in items if i["type"] == "user_message"] == [
        "remember alpha",
        "remember beta",
    ]
    assert ok(verified).stdout.startswith("PASS") and sid in verified.stdout
    assert "remember alpha" in ok(table).stdout and "FINAL_OUTPUT" not in table.stdout
    assert bad_type.returncode == 2
    one_error_line(bad_type, "NOPE")


def test_sessions_fork_refuses_existing_id_and_delete(live_stack: Stack, cli: InProcessCli) -> None:
    sid, copy = unique("cli-fork"), unique("cli-copy")
    live_stack.producer.run(sid, "remember kept", agent="notes", wait_s=60)
    env = live_stack.env
    assert "forked" in ok(cli(env, "sessions", "fork", sid, copy)).stdout
    # no --yes and no terminal to confirm on (a script): refused like `purge`, nothing deleted;
    # a real process, whose stdin is what the shell gave it
    unconfirmed = tether(env, "sessions", "delete", copy, stdin=subprocess.DEVNULL)
    assert unconfirmed.returncode == 2 and unconfirmed.stdout == ""
    one_error_line(unconfirmed, f"default/{copy}", "add --yes")
    refused = cli(env, "sessions", "fork", sid, copy)
    verified = cli(env, "sessions", "verify", sid, copy, "--json")
    assert refused.returncode == 2
    one_error_line(refused, "SessionExists", copy)
    assert [r["ok"] for r in json.loads(ok(verified).stdout)] == [True, True]
    deleted = json.loads(ok(cli(env, "sessions", "delete", copy, "--yes", "--json")).stdout)
    assert deleted["head_deleted"] is True
    assert not [k for k in live_stack.s3_keys() if copy in k]
    gone, delete_again, debug, source = (
        cli(env, *argv)
        for argv in (
            ["sessions", "show", copy],
            ["sessions", "delete", copy, "--yes"],
            ["--debug", "sessions", "show", copy],
            ["sessions", "verify", sid],
        )
    )
    assert gone.returncode == 2
    one_error_line(gone, "not found")
    one_error_line(delete_again, "not found")
    assert debug.returncode == 2 and "Traceback" in debug.stderr
    assert ok(source).stdout.startswith("PASS")  # the source is untouched


# --- configuration ------------------------------------------------------------------------------


def test_config_masks_secrets(live_stack: Stack) -> None:
    secrets = {
        "TETHER_OPENAI_API_KEY": "sk-secret-abc123",
        "TETHER_BROKER_URL": "redis://:hunter2-pass@broker.example:6379/0",
    }
    as_json, text = parallel(live_stack.env, ["config", "--json"], ["config"], extra_env=secrets)
    values = json.loads(ok(as_json).stdout)
    assert values["TETHER_OPENAI_API_KEY"] == "********"
    assert values["TETHER_LEASE_TTL_MS"] == int(live_stack.env["TETHER_LEASE_TTL_MS"])
    for output in (as_json, ok(text)):
        assert "sk-secret" not in output.stdout + output.stderr
        assert "hunter2" not in output.stdout + output.stderr
    assert "TETHER_OPENAI_API_KEY" in text.stdout and "broker.example" in text.stdout


def test_bad_or_unknown_settings_fail_with_one_line(live_stack: Stack) -> None:
    env = live_stack.env
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        not_int = pool.submit(tether, env, "config", extra_env={"TETHER_LEASE_TTL_MS": "abc"})
        too_low = pool.submit(
            tether,
            env,
            "run",
            "s",
            "x",
            "--agent",
            "echo",
            extra_env={"TETHER_LEASE_TTL_MS": "10"},
        )
        unknown = pool.submit(tether, env, "sessions", "list", extra_env={"TETHER_FOO": "1"})
    for future in (not_int, too_low):
        assert future.result().returncode == 2
        one_error_line(future.result(), "TETHER_LEASE_TTL_MS")
    assert unknown.result().returncode == 2
    one_error_line(unknown.result(), "TETHER_FOO")


def test_unknown_option_or_command_is_a_usage_error() -> None:
    def usage(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tether.producer.ops.cli", *argv],
            capture_output=True,
            text=True,
            timeout=60,
        )

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        done = list(
            pool.map(lambda argv: (argv, usage(*argv)), (["--nope"], ["sessions", "nosuch"]))
        )
    for argv, proc in done:
        assert proc.returncode == 2, (argv, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_approve_a_waiting_run_from_the_shell(live_stack: Stack, cli: InProcessCli) -> None:
    sid, other = unique("cli-approve"), unique("cli-reject")
    waiting = ok(cli(live_stack.env, "run", sid, "transfer 7", "--agent", "approver", "--json"))
    result = json.loads(waiting.stdout)
    assert result["status"] == "WAITING"
    (call,) = result["pending"]
    assert (call["tool"], call["reason"]) == ("transfer", "approval")
    text = ok(cli(live_stack.env, "run", other, "transfer 8", "--agent", "approver"))
    hint = next(line for line in text.stderr.splitlines() if line.startswith("waiting on"))
    second = hint.split()[2].rstrip(":")
    assert f"tether approve {other} {second}" in hint
    # `approve` as a real process, the way a shell runs it
    approved = ok(tether(live_stack.env, "approve", sid, call["call_id"], "--agent", "approver"))
    assert approved.stdout.strip() == "transferred 7"
    rejected = ok(
        cli(live_stack.env, "reject", other, second, "--agent", "approver", "--reason", "not today")
    )
    assert "not today" in rejected.stdout
    again = cli(live_stack.env, "approve", sid, call["call_id"], "--agent", "approver")
    one_error_line(again, "InvalidInput", "is not pending")
