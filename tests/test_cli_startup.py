"""``tether --help`` (and ``tether <command> --help``) stays cheap: building the command tree and
printing help imports none of the heavy dependencies the commands use when they run.

No timing here (a loaded CI machine would make it flaky): the check is which modules a fresh
interpreter holds afterwards. ``python -m bench.cli_startup`` measures the time itself.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TIMEOUT_S = 60

#: What ``--help`` must not import, with why each is kept out. Together they cost ~0.5 s of a
#: ~0.75 s start before the command modules imported them lazily.
HEAVY = (
    "celery",  # the producer's broker client
    "kombu",
    "billiard",
    "boto3",  # the S3 store
    "botocore",
    "redis",  # redis-py pulls in the OpenTelemetry SDK when installed
    # not pydantic itself: before any subcommand runs, typer 0.29 coerces the group's unset
    # --help flag through a pydantic TypeAdapter, so `tether run --help` imports it whatever
    # the CLI does
    "pydantic_settings",  # the settings (~0.15 s on their own)
    "tether.core",  # the run protocol's pydantic models
    "tether.runs.options",  # RunOptions: ~80 ms to build; the help reads runs.option_docs
    "dotenv",
    "psutil",  # the local stack
    "tether.settings",
    "tether.worker",
    "tether.producer.client",
    "tether.producer.ops.render",
    "tether.persistence",
)

#: Walks the real command tree, asks every command and group for its help inside one
#: interpreter, then prints the modules it holds (stdout of the help itself goes to /dev/null).
_EVERY_HELP = """
import contextlib, json, os, sys
import typer
from tether.producer.ops.cli import app, run_cli

def paths(command, prefix):
    yield prefix
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from paths(sub, [*prefix, name])

codes = {}
for path in paths(typer.main.get_command(app), []):
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        codes[" ".join(path)] = run_cli([*path, "--help"])
print(json.dumps({"codes": codes, "modules": sorted(sys.modules)}))
"""


def _loaded_heavy(modules: list[str] | set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def _no_heavy(modules: list[str] | set[str]) -> None:
    heavy = _loaded_heavy(modules)
    assert not heavy, (
        f"--help imported {heavy}: import them inside the command functions that use them"
    )


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python <argv>`` in ``cwd`` without TETHER_* variables (no .env nor stack applies)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def _imported_by(argv: list[str], cwd: Path) -> set[str]:
    """The modules ``python -X importtime <argv>`` imported (its report on stderr)."""
    done = _run(["-X", "importtime", *argv], cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip())
    names.discard("package")  # the report's header line
    return names


def test_tether_help_imports_no_heavy_dependency(tmp_path: Path) -> None:
    imported = _imported_by(["-m", "tether.producer.ops.cli", "--help"], tmp_path)
    # the probe sees the real import tree: the CLI, its command modules and typer's help
    assert {"tether.producer.ops.cli.runs", "tether.producer.ops.cli.stack", "typer"} <= imported
    _no_heavy(imported)


@pytest.mark.parametrize("command", [["run"], ["sessions", "list"], ["up"], ["batch"]])
def test_a_command_help_imports_no_heavy_dependency(command: list[str], tmp_path: Path) -> None:
    imported = _imported_by(["-m", "tether.producer.ops.cli", *command, "--help"], tmp_path)
    _no_heavy(imported)


def test_every_command_help_together_imports_no_heavy_dependency(tmp_path: Path) -> None:
    """Every command and group of the tree, found by walking it, so a new command is covered."""
    done = _run(["-c", _EVERY_HELP], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    codes = report["codes"]
    assert {"", "run", "sessions", "sessions list", "worker", "up", "console"} <= set(codes)
    assert set(codes.values()) == {0}, codes
    _no_heavy(report["modules"])


def test_the_check_sees_a_heavy_import(tmp_path: Path) -> None:
    """A command that runs (here ``config``, which reads the settings) does load them: the
    probe would notice a top-level import of the same modules."""
    imported = _imported_by(["-m", "tether.producer.ops.cli", "config", "--json"], tmp_path)
    assert "tether.settings" in _loaded_heavy(imported)


def test_the_tether_package_imports_its_public_names_on_first_use(tmp_path: Path) -> None:
    """``import tether`` (run by every ``tether.*`` import, the CLI's too) imports none of its
    public names until one is used, and every one of them then resolves."""
    probe = (
        "import json, sys, tether\n"
        "before = sorted(sys.modules)\n"
        "for name in tether.__all__: getattr(tether, name)\n"
        "print(json.dumps({'before': before, 'dir': dir(tether)}))\n"
    )
    done = _run(["-c", probe], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert not [m for m in report["before"] if m.startswith("tether.")]
    assert set(report["dir"]) >= set(_type_checking_exports())


def _type_checking_exports() -> dict[str, str]:
    """``name -> module`` of the ``if TYPE_CHECKING:`` imports of tether/__init__.py."""
    import tether

    source = Path(tether.__file__).read_text()
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module
                found.update({alias.name: stmt.module for alias in stmt.names})
    return found


def test_the_lazy_table_says_what_the_type_checker_sees() -> None:
    """The table ``tether.__getattr__`` reads, the type-only imports and ``__all__`` agree."""
    import tether

    exports: dict[str, str] = tether._EXPORTS
    assert exports == _type_checking_exports()
    assert sorted(exports) == sorted(tether.__all__)
