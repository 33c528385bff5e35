""".ci/run installs every system package the tests need: tests/README.md names the binaries the
fixtures start (and fail without, never skip), and each one's Debian package is installed by the
script when missing. rabbitmq-server was not, so `.ci/run` on a fresh machine failed the RabbitMQ
tests."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Each binary a fixture needs, and the Debian package that installs it.
PACKAGE_OF = {
    "redis-server": "redis-server",
    "redis-cli": "redis-tools",
    "rabbitmq-server": "rabbitmq-server",
    "chromium": "chromium",
}


def _needed_binaries() -> set[str]:
    text = " ".join((ROOT / "tests" / "README.md").read_text().split())
    sentence = text[text.index("The machine needs") :].split(";", 1)[0]
    return set(re.findall(r"`([a-z][a-z0-9-]*)`", sentence))


def test_the_ci_script_installs_every_package_the_tests_need() -> None:
    needed = _needed_binaries()
    assert needed == set(PACKAGE_OF), f"map each binary tests/README.md names: {needed}"
    script = (ROOT / ".ci" / "run").read_text()
    installed = set(re.findall(r"packages\+=\(([a-z0-9-]+)\)", script))
    assert {PACKAGE_OF[b] for b in needed} <= installed, installed
    code = "".join(p.read_text() for p in (ROOT / "tests" / "support").glob("*.py"))
    code += "".join(p.read_text() for p in (ROOT / "shared" / "dev").glob("*.py"))
    assert all(binary in code for binary in needed)  # each is one a fixture starts
