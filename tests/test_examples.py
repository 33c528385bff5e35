"""The examples the README points to keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    )
    assert "COMPLETED: a is value-of-a in 2 steps" in out.stdout
    assert "ok=True" in out.stdout


@pytest.mark.slow  # a long variant: `make test-long` (keeps `make test` under 10 min)
def test_durable_run_example_resumes_after_a_sigkill(tmp_path: Path) -> None:
    """examples/durable_run.py: the worker is killed after step 2, the other one finishes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "durable_run.py")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "after 2 attempts" in out.stdout
    assert "ledger: 5 entries, 5 distinct keys" in out.stdout
