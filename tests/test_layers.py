"""The import layering is a checked contract: the real tree keeps it, a forbidden import breaks it.

`make lint` runs `lint-imports` (contracts in pyproject.toml). These tests run the same check on
a copy of the source laid out as installed (`tether/`, `tether/producer/`, `tether/worker/`), once
as it is and once with a producer -> worker import added, so the check is known to bite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def installed_layout(root: Path) -> Path:
    """Copy the three folders to ``root`` the way the wheel installs them."""
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "shared", root / "tether", ignore=skip)
    shutil.copytree(REPO / "producer", root / "tether" / "producer", ignore=skip)
    shutil.copytree(REPO / "worker", root / "tether" / "worker", ignore=skip)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} is missing: install the dev extra (`make test` does)")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_source_tree_keeps_every_layer_contract(tmp_path: Path) -> None:
    done = lint_imports(installed_layout(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_producer_importing_the_worker_breaks_the_contract(tmp_path: Path) -> None:
    root = installed_layout(tmp_path)
    client = root / "tether" / "producer" / "client.py"
    client.write_text(client.read_text() + "\nfrom tether.worker import tasks  # noqa\n")
    done = lint_imports(root)
    assert done.returncode != 0
    assert "tether.producer.client -> tether.worker.tasks" in done.stdout, done.stdout


def test_the_runtime_importing_celery_breaks_the_contract(tmp_path: Path) -> None:
    root = installed_layout(tmp_path)
    cycle = root / "tether" / "worker" / "engine" / "cycle.py"
    cycle.write_text(cycle.read_text() + "\nimport celery  # noqa\n")
    done = lint_imports(root)
    assert done.returncode != 0
    assert "tether.worker.engine.cycle -> celery" in done.stdout, done.stdout
