"""The built wheel installs one import root, ``tether``, and works outside the repository.

The dev install is an editable link tree of this checkout, so it cannot show what users get.
These tests build a real wheel from a copy of the checkout, install it (with its runtime
dependencies) into a fresh virtual environment without system site-packages, and import it from a
directory holding no project files, so nothing can come from the working tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
#: Source folder -> where its files land in the wheel (pyproject's package-dir).
PACKAGE_DIRS = {"shared": "tether", "producer": "tether/producer", "worker": "tether/worker"}
INSTALL_TIMEOUT_S = 240


@dataclass(frozen=True)
class Installed:
    """A wheel and a fresh virtual environment it was installed into."""

    source: Path
    wheel: Path
    venv: Path
    #: A directory with no project files: the cwd of every check.
    elsewhere: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def run(self, args: Sequence[str | Path]) -> subprocess.CompletedProcess[str]:
        """Run ``args`` in the empty directory with an environment that points nowhere else."""
        return subprocess.run(
            [str(a) for a in args],
            cwd=self.elsewhere,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def clean_env() -> dict[str, str]:
    """os.environ without anything that adds import paths or Tether settings."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("TETHER_")}
    env["PYTHONNOUSERSITE"] = "1"  # no ~/.local site-packages either
    return env


def _copy_ignore(directory: str, names: list[str]) -> list[str]:
    # caches and the editable install's build/ and egg-info are not sources (and the editable
    # link tree would be packed as is); the venv and .git are large and irrelevant
    ignored = [n for n in names if n == "__pycache__"]
    if Path(directory) == REPO:
        ignored += [
            n for n in names if n.startswith(".") or n == "build" or n.endswith(".egg-info")
        ]
    return ignored


def _check(args: Sequence[str | Path], cwd: Path) -> None:
    proc = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, f"{' '.join(map(str, args))} failed:\n{proc.stdout}\n{proc.stderr}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("install")
    # build from a copy: building in place would write build/ and *.egg-info into the checkout,
    # next to the editable install's link tree that other processes are importing from
    source = root / "source"
    shutil.copytree(REPO, source, ignore=_copy_ignore)
    dist = root / "dist"
    _check([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, source], root)
    (wheel,) = dist.glob("tether-*.whl")
    venv = root / "venv"
    _check([sys.executable, "-m", "venv", venv], root)
    _check([venv / "bin" / "python", "-m", "pip", "install", "-q", wheel], root)
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return Installed(source, wheel, venv, elsewhere)


def test_venv_has_no_system_site_packages(installed: Installed) -> None:
    config = (installed.venv / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in config
    check = installed.run([installed.python, "-c", "import sys; print(sys.flags.no_user_site)"])
    assert check.stdout.strip() == "1"


def test_wheel_holds_only_the_tether_import_root(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        top = {name.split("/", 1)[0] for name in wheel.namelist()}
    assert {name for name in top if not name.endswith(".dist-info")} == {"tether"}


def test_wheel_ships_every_module_of_the_source_folders(installed: Installed) -> None:
    # pyproject lists packages explicitly, so a new subpackage missing from the list would
    # import in the editable install and be absent from the wheel
    with zipfile.ZipFile(installed.wheel) as wheel:
        shipped = set(wheel.namelist())
    expected = {
        f"{target}/{path.relative_to(installed.source / folder).as_posix()}"
        for folder, target in PACKAGE_DIRS.items()
        for path in (installed.source / folder).rglob("*")
        if path.is_file()
        and (path.suffix == ".py" or path.name == "py.typed")
        and "__pycache__" not in path.parts
    }
    assert expected, "no source files found; the copy of the checkout is empty"
    assert sorted(expected - shipped) == []


def test_installed_tether_imports_from_a_directory_without_project_files(
    installed: Installed,
) -> None:
    assert list(installed.elsewhere.iterdir()) == []
    code = (
        "from tether import Agent; from tether.producer import Producer; "
        "import tether.worker.app; import tether; print(tether.__file__)"
    )

    proc = installed.run([installed.python, "-c", code])

    assert proc.returncode == 0, proc.stderr
    # the installed copy, not the checkout
    assert Path(proc.stdout.strip()).is_relative_to(installed.venv / "lib"), proc.stdout


@pytest.mark.parametrize("name", ["shared", "producer", "worker"])
def test_pre_0_2_top_level_names_are_not_installed(installed: Installed, name: str) -> None:
    proc = installed.run([installed.python, "-c", f"import {name}"])

    assert proc.returncode == 1
    assert f"ModuleNotFoundError: No module named '{name}'" in proc.stderr


def test_tether_console_script_runs(installed: Installed) -> None:
    proc = installed.run([installed.venv / "bin" / "tether", "--help"])

    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout
