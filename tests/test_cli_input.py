"""A run's input from a file or standard input (``--input-file F``, ``--input-file -``): a large
input on the command line hit Linux's 128 KiB limit per argument ("Argument list too long");
and worker node names that differ by default (``tether worker`` twice in one folder gave two
nodes named ``celery@<host>``). Real processes, on a private redis-server (and the shared stack
for a whole run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.stack import Stack, unique
from tether.errors import InputTooLarge, InvalidInput
from tether.producer import Producer
from tether.settings import Settings

BIG = 300_000  # over MAX_ARG_STRLEN (131,072 bytes): no command line can carry it


def tether(
    env: dict[str, str], *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.producer.ops.cli", *args],
        env=env,
        input=stdin,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _env(redis_url: str, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return {**env, "TETHER_REDIS_URL": redis_url, **more}


def test_a_300_kb_input_from_a_file_or_stdin_is_submitted_whole(
    redis_url: str, tmp_path: Path
) -> None:
    text = ("a line of a long document é\n" * (BIG // 28 + 1))[:BIG]
    source = tmp_path / "doc.txt"
    source.write_text(text)
    env = _env(redis_url, TETHER_MAX_INPUT_BYTES="400000")
    with pytest.raises(OSError, match="Argument list too long"):  # what the issue hit
        tether(env, "submit", "s-1", text, "--agent", "echo")
    from_file = tether(env, "submit", "s-1", "--input-file", str(source), "--agent", "echo")
    from_stdin = tether(env, "submit", "s-2", "--input-file", "-", "--agent", "echo", stdin=text)
    producer = Producer(Settings(redis_url=redis_url))
    try:
        for done in (from_file, from_stdin):
            assert done.returncode == 0, done.stderr
            record = producer.record(done.stdout.strip())
            assert record is not None and record.request is not None
            assert record.request.input == text
    finally:
        producer.close()


def test_run_reads_its_input_file_on_real_workers(live_stack: Stack, tmp_path: Path) -> None:
    source = tmp_path / "q.txt"
    source.write_text("from a file")
    done = tether(live_stack.env, "run", unique("f"), "--input-file", str(source), "-a", "echo")
    assert (done.returncode, done.stdout.strip()) == (0, "echo: from a file"), done.stderr


def test_the_input_is_given_once_and_read_within_the_limit(tmp_path: Path) -> None:
    from tether.producer.ops.cli.support import run_input

    with pytest.raises(InvalidInput, match="not both"):
        run_input("hi", "f.txt", 100)
    with pytest.raises(InvalidInput, match="no input: give INPUT, or --input-file"):
        run_input(None, None, 100)
    with pytest.raises(InvalidInput, match=r"--input-file .*missing\.txt cannot be read"):
        run_input(None, str(tmp_path / "missing.txt"), 100)
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(InvalidInput, match="is not UTF-8 text"):
        run_input(None, str(tmp_path / "latin1.txt"), 100)
    (tmp_path / "big.txt").write_bytes(b"x" * 101)
    with pytest.raises(InputTooLarge, match=r"more than 100 bytes.*TETHER_MAX_INPUT_BYTES"):
        run_input(None, str(tmp_path / "big.txt"), 100)
    assert run_input("as given", None, 100) == "as given"


def test_each_worker_command_names_its_node_after_its_own_process(tmp_path: Path) -> None:
    env = _env("redis://127.0.0.1:1/0")
    printed = [tether(env, "worker", "--print-command", cwd=tmp_path) for _ in range(2)]
    names = [p.stdout.split("--hostname ", 1)[1].split()[0] for p in printed]
    assert names[0] != names[1] and all(n.startswith("tether-") for n in names), names
    given = tether(env, "worker", "-n", "w1@%h", "--print-command", cwd=tmp_path)
    assert "--hostname w1@%h" in given.stdout and given.stdout.count("--hostname") == 1
