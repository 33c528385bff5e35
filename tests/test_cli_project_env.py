"""The CLI in a subfolder of a project uses the project's local stack (its ``.tether/env``), as
``git`` finds its repository: from ``examples/`` of a project with a ``tether up`` stack, every
command used the default ``redis://127.0.0.1:6379/0`` (another Redis, or none) and a store
under ``examples/.tether``, silently. The environment and this folder's own files still win,
and a ``.tether/env`` above the project's root is never read. Settings only: nothing here
connects to anything (the URLs name closed ports)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.producer.ops.cli.support import cli_settings

STACK_URL = "redis://127.0.0.1:1/0"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("TETHER_"):
            monkeypatch.delenv(name)
    root = tmp_path / "proj"
    (root / ".tether").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / ".tether" / "env").write_text(
        f"TETHER_REDIS_URL={STACK_URL}\nTETHER_BROKER_URL={STACK_URL}\n"
        f"TETHER_STORE_URL=file://{root / '.tether' / 'store'}\nTETHER_NAMESPACE=projns\n"
    )
    (root / "examples" / "deep").mkdir(parents=True)
    return root


def test_a_subfolder_uses_the_projects_local_stack(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project / "examples" / "deep")
    settings = cli_settings()
    assert settings.redis_url == STACK_URL and settings.broker_url == STACK_URL
    assert settings.namespace == "projns"
    assert settings.store_url == f"file://{project / '.tether' / 'store'}"


def test_the_environment_and_the_folders_own_files_still_win(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = project / "examples"
    monkeypatch.chdir(here)
    monkeypatch.setenv("TETHER_NAMESPACE", "fromenv")
    (here / ".env").write_text("TETHER_QUEUE=mine\n")
    settings = cli_settings()
    assert (settings.namespace, settings.queue, settings.redis_url) == (
        "fromenv",
        "mine",
        STACK_URL,
    )
    (here / ".tether").mkdir()
    (here / ".tether" / "env").write_text("TETHER_REDIS_URL=redis://127.0.0.1:2/0\n")
    assert cli_settings().redis_url == "redis://127.0.0.1:2/0"  # this folder's stack
    assert cli_settings().namespace == "fromenv"


def test_a_stack_above_the_projects_root_is_not_read(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inner = project / "examples" / "inner"
    inner.mkdir()
    (inner / "pyproject.toml").write_text("[project]\nname = 'inner'\n")  # a project of its own
    monkeypatch.chdir(inner)
    assert cli_settings().namespace == "tether"  # the defaults: the outer stack is not its
