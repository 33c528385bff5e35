"""``tether ...`` run in the test's own process: what the console script runs (``run_cli``),
without the second or so of imports a subprocess pays at every start.

The test files that hold the CLI to a real process (exit codes, signals, one line on a real
stderr) keep a few commands of each family as subprocesses; the rest run here, with the same
arguments and the same environment (its ``TETHER_*`` and ``AWS_*`` variables, the others as
the test process has them), and give back the same three things a subprocess does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Done:
    """What a command left: its exit code and its output (as ``subprocess.CompletedProcess``)."""

    returncode: int
    stdout: str
    stderr: str


class InProcessCli:
    """``cli(env, *args, extra_env=...)``: ``tether *args`` here, with ``env``'s settings only."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys

    def __call__(
        self, env: Mapping[str, str], *args: str, extra_env: Mapping[str, str] | None = None
    ) -> Done:
        from tether.producer.ops.cli import run_cli

        settings = {
            name: value
            for name, value in {**env, **(extra_env or {})}.items()
            if name.startswith(("TETHER_", "AWS_"))
        }
        with pytest.MonkeyPatch.context() as patch:
            for name in os.environ:
                if name.startswith(("TETHER_", "AWS_")) and name not in settings:
                    patch.delenv(name)
            for name, value in settings.items():
                patch.setenv(name, value)
            self._capsys.readouterr()  # what the test printed before is not the command's
            code = run_cli(list(args))
            out = self._capsys.readouterr()
        return Done(code, out.out, out.err)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> InProcessCli:
    """``tether`` in this process (see :class:`InProcessCli`)."""
    return InProcessCli(capsys)
