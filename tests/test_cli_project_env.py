"""Every process in a subfolder of a project uses the project's local stack (its
``.tether/env``), as ``git`` finds its repository: the CLI, ``load_settings()``, ``Producer()``
and ``AsyncProducer()`` alike (from ``examples/`` of a project with a ``tether up`` stack, a
``Producer()`` used the default ``redis://127.0.0.1:6379/0`` while ``tether config`` showed the
stack). The environment and this folder's own files still win, and a ``.tether/env`` above the
project's root is never read. With no setting and no stack there is no Redis to fall back on:
the process fails naming ``TETHER_REDIS_URL``, ``TETHER_BROKER_URL`` and ``tether up``. Settings
only: nothing here connects to anything (the URLs name closed ports)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.errors import SettingsError
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


def test_load_settings_and_both_producers_use_the_projects_stack_from_a_subfolder(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.producer import AsyncProducer, Producer
    from tether.settings import load_settings

    monkeypatch.chdir(project / "examples" / "deep")
    assert load_settings().effective_redis_url == STACK_URL
    assert load_settings().namespace == "projns"
    producer = Producer()  # builds its clients, connects to nothing yet
    try:
        assert producer.settings.effective_redis_url == STACK_URL
        assert producer.celery.conf.broker_url == STACK_URL
    finally:
        producer.close()
    assert AsyncProducer().settings.effective_redis_url == STACK_URL


def _no_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("TETHER_"):
            monkeypatch.delenv(name)
    root = tmp_path / "bare"
    (root / "sub").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'bare'\n")
    monkeypatch.chdir(root / "sub")
    return root


def _names_the_fix(message: str) -> None:
    for needed in ("TETHER_REDIS_URL", "TETHER_BROKER_URL", "tether up"):
        assert needed in message, message
    assert "6379" not in message


def test_no_settings_and_no_stack_fail_naming_the_settings_not_6379(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, each of these resolved ``redis://127.0.0.1:6379/0`` and went on (none of them
    connects here: the failure is the settings', before any I/O)."""
    from tether.producer import AsyncProducer, Producer
    from tether.producer.ops.cli import run_cli
    from tether.runs.celery_config import celery_config
    from tether.settings import load_settings

    _no_stack(tmp_path, monkeypatch)
    settings = load_settings()  # reading them is fine: `tether config`, `tether demo` need it
    for make in (Producer, AsyncProducer, lambda: celery_config(settings)):
        with pytest.raises(SettingsError) as refused:
            make()
        _names_the_fix(str(refused.value))
        assert set(refused.value.variables) == {"TETHER_REDIS_URL", "TETHER_BROKER_URL"}
    assert run_cli(["worker", "--print-command"]) == 2  # the exit code of a bad setting
    _names_the_fix(capsys.readouterr().err)


def test_an_explicit_localhost_redis_url_still_works_and_is_the_broker_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.producer import Producer
    from tether.runs.celery_config import celery_config
    from tether.settings import load_settings

    _no_stack(tmp_path, monkeypatch)
    url = "redis://localhost:6390/0"
    monkeypatch.setenv("TETHER_REDIS_URL", url)
    settings = load_settings()
    # the broker follows TETHER_REDIS_URL: it used to stay on the default 127.0.0.1:6379
    assert celery_config(settings)["broker_url"] == url
    assert (settings.effective_redis_url, settings.effective_broker_url) == (url, url)
    Producer().close()
    cluster = "redis+cluster://127.0.0.1:7000"
    monkeypatch.setenv("TETHER_REDIS_URL", cluster)
    with pytest.raises(SettingsError, match="TETHER_BROKER_URL is required"):
        load_settings().effective_broker_url  # noqa: B018 - Celery cannot use a cluster
