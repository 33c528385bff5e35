"""Every exit code of ``tether`` means one thing, and docs/cli.md lists each: the table is held
equal to the ``EXIT_*`` constants of :mod:`tether.producer.ops.cli.support`, and every other
``EXIT_*`` constant (the batch commands', the worker's) is one of its codes. ``tether console``
on a taken port used to announce that it served, then exit 3, the code of ``BudgetExceeded``.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import socket
import subprocess
import sys
from pathlib import Path

import tether.producer.ops.cli as cli_package
from tether.producer.ops.cli import support

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
ROW = re.compile(r"^\| (\d+) \| `(EXIT_[A-Z_]+)` \| (.+) \|$")


def _documented() -> dict[str, int]:
    text = DOC.read_text()
    section = text[text.index("## Exit codes") :]
    rows = [ROW.match(line) for line in section.splitlines()]
    return {m.group(2): int(m.group(1)) for m in rows if m is not None}


def _constants(module: object) -> dict[str, int]:
    return {
        name: value
        for name, value in vars(module).items()
        if name.startswith("EXIT_") and isinstance(value, int) and not isinstance(value, bool)
    }


def test_the_documented_table_is_the_codes_constants_one_meaning_each() -> None:
    documented = _documented()
    constants = _constants(support)
    assert documented == constants
    assert len(set(constants.values())) == len(constants), "two meanings share a code"


def test_every_other_exit_constant_is_a_documented_code() -> None:
    codes = set(_documented().values())
    found = pkgutil.iter_modules(cli_package.__path__)
    modules = [f"{cli_package.__name__}.{m.name}" for m in found if m.name != "__main__"]
    modules.append("tether.worker.app")
    seen: dict[str, int] = {}
    for name in modules:
        for constant, value in _constants(importlib.import_module(name)).items():
            seen[f"{name}.{constant}"] = value
    assert seen and {k: v for k, v in seen.items() if v not in codes} == {}


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    done = subprocess.run(
        [sys.executable, "-m", "tether.producer.ops.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout.strip()) == (0, f"tether {version('tether')}")


def test_console_on_a_taken_port_fails_before_announcing_with_its_own_code(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["TETHER_REDIS_URL"] = "redis://127.0.0.1:1/0"  # never reached: it stops before
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "tether.producer.ops.cli", "console", "--port", str(port)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == support.EXIT_ADDRESS_IN_USE == 5, done.stderr
    assert done.returncode != support.EXIT_BUDGET
    assert "console on" not in done.stderr  # never said it served
    assert done.stderr.strip() == (
        f"error: AddressInUse: 127.0.0.1:{port} is in use by another process (another "
        "console?); pass --port N, or --port 0 for any free port"
    )
