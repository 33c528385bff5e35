"""A typo in ``tether batch --agent`` costs nothing and locks nothing: the CLI refuses an agent
the workers of a plain ``tether up`` stack do not know (it ran every case to failure and exited
0); a results file whose every line is a run that never ran no longer locks the corrected
command out ("holds results of batch ..."); ``batch retry --agent`` corrects the agent (it
repeated the typo); and Ctrl-C prints the command that resumes. On the shared stack's real
workers, but for the refusal, which touches nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.support.stack import Stack, eventually, unique
from tether.producer.ops.batch import run_batch
from tether.producer.ops.cli import batch as batch_cli


def write_cases(path: Path, cases: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(case) + "\n" for case in cases))
    return path


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(x) for x in text[: text.rfind("\n") + 1].splitlines() if x.strip()]


def batch(stack: Stack, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.producer.ops.cli", "batch", *args],
        env=stack.env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_an_unknown_agent_is_refused_without_agent_modules_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No TETHER_AGENT_MODULES: the workers of `tether up` know the built-ins, and so does this
    process. Redis and the broker are a closed port: the refusal comes before any I/O."""
    for name in list(os.environ):
        if name.startswith("TETHER_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TETHER_REDIS_URL", "redis://127.0.0.1:9/0")
    path = write_cases(tmp_path / "c.jsonl", [{"id": "a", "input": "x"}])
    outcome = CliRunner().invoke(batch_cli.batch_app, [str(path), "--agent", "ecoh"])
    assert outcome.exit_code == 2, outcome.output
    assert "UnknownAgent: unknown agent 'ecoh'; known agents: " in outcome.output
    assert "echo" in outcome.output and "nothing was submitted" in outcome.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl"]


def test_a_typo_batch_neither_locks_the_corrected_command_nor_survives_retry(
    live_stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = unique("typo")
    cases = [
        {"id": f"{tag}-{i}", "input": f"hi {i}", "expected": f"echo: hi {i}"} for i in range(3)
    ]
    path = write_cases(tmp_path / "cases.jsonl", cases)
    out = tmp_path / "cases.results.jsonl"
    # the Python API checks no agent (each case fails UnknownAgent): the file a typo left
    typo = run_batch(live_stack.producer, path, agent="ecoh", concurrency=3)
    assert typo.by_status == {"FAILED": 3} and {x["error_type"] for x in lines(out)} == {
        "UnknownAgent"
    }
    fixed = batch(live_stack, tmp_path, str(path), "--agent", "echo", "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert "that never ran (UnknownAgent): replaced by batch" in fixed.stderr
    summary = json.loads(fixed.stdout)
    assert (summary["finished"], summary["passed"], summary["resumed"]) == (3, 3, 0)
    assert {x["batch_id"] for x in lines(out)} == {summary["batch_id"]} != {typo.batch_id}

    other = tmp_path / "typo.results.jsonl"
    run_batch(live_stack.producer, path, agent="ecoh", out=other, concurrency=3)
    for name, value in live_stack.env.items():  # the refusals in this process: no service used
        if name.startswith(("TETHER_", "AWS_")):
            monkeypatch.setenv(name, value)
    again = CliRunner().invoke(batch_cli.batch_app, [str(path), "-a", "ecoh2", "-o", str(out)])
    assert again.exit_code == 2 and "unknown agent 'ecoh2'" in again.output
    refused = CliRunner().invoke(batch_cli.batch_app, ["retry", str(other), "-a", "ecoh3"])
    assert refused.exit_code == 2 and "unknown agent 'ecoh3'" in refused.output
    retried = batch(live_stack, tmp_path, "retry", str(other), "--agent", "echo", "--json")
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout)["passed"] == 3
    assert [(x["agent"], x["status"], x["attempt"]) for x in lines(other)] == [
        ("echo", "COMPLETED", 1)
    ] * 3


def test_ctrl_c_in_a_batch_prints_the_command_that_resumes_it(
    live_stack: Stack, tmp_path: Path
) -> None:
    tag = unique("int")
    n = 60
    path = write_cases(
        tmp_path / "many.jsonl", [{"id": f"{tag}-{i}", "input": "x"} for i in range(n)]
    )
    out = tmp_path / "many.results.jsonl"
    args = [str(path), "--agent", "echo", "--concurrency", "1", "--json"]
    first = subprocess.Popen(
        [sys.executable, "-m", "tether.producer.ops.cli", "batch", *args],
        env=live_stack.env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as a CI runner or a harness may start it (SIGINT ignored): Ctrl-C must still stop it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        eventually(lambda: len(lines(out)) >= 1 or first.poll() is not None, timeout_s=120)
        first.send_signal(signal.SIGINT)
        _, stderr = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 130, stderr
    done_before = len(lines(out))
    assert 1 <= done_before < n, "the batch ended before it could be interrupted"
    hint = stderr.strip().splitlines()[-1]
    assert hint.startswith("interrupted: finished cases are kept in the results file"), stderr
    command = hint.split("run the same command: ", 1)[1]
    assert command == "tether batch " + " ".join(args)
    resumed = batch(live_stack, tmp_path, *args)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["resumed"] >= done_before and summary["finished"] == n
