"""The performance tables of README.md and docs/performance.md are what the committed benchmark
results give (``python -m bench.publish --check``), and every test the README names exists.

Fast: no services, only the JSON files in ``bench/results`` and the pages.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

from bench import publish

ROOT = Path(__file__).resolve().parent.parent


def test_the_performance_tables_match_the_committed_results() -> None:
    stale = publish.stale(ROOT)
    assert not stale, (
        f"{', '.join(map(str, stale))} differ from what bench/results/*.json give: "
        "run `python -m bench.publish` (never edit the generated tables by hand)"
    )


def test_the_check_fails_when_a_number_drifts(tmp_path: Path) -> None:
    """A copy of the project whose latest.json moved by one run/s is reported stale."""
    for name in ("README.md", "docs/performance.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "bench" / "results", tmp_path / "bench" / "results")
    shutil.copytree(ROOT / "docs" / "img" / "perf", tmp_path / "docs" / "img" / "perf")
    assert publish.stale(tmp_path) == []
    latest = tmp_path / "bench" / "results" / "latest.json"
    text = latest.read_text()
    drifted = re.sub(r'("id": "P2".*?"median": )([0-9.]+)', _plus_one, text, count=1, flags=re.S)
    assert drifted != text
    latest.write_text(drifted)
    assert publish.stale(tmp_path) == [Path("README.md"), Path("docs/performance.md")]
    assert publish.main(["--check", "--root", str(tmp_path)]) == 1
    assert publish.main(["--root", str(tmp_path)]) == 0  # rewrites them
    assert publish.stale(tmp_path) == []


def _plus_one(match: re.Match[str]) -> str:
    return f"{match.group(1)}{float(match.group(2)) + 1.0}"


def test_a_page_without_its_markers_is_refused(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "bench" / "results", tmp_path / "bench" / "results")
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "performance.md", tmp_path / "docs" / "performance.md")
    (tmp_path / "README.md").write_text("# no markers here\n")
    with pytest.raises(publish.PublishError, match="perf:begin"):
        publish.stale(tmp_path)


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    }


def test_every_test_the_readme_names_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", readme)
    assert len(named) > 20, "the guarantees table names its tests as `tests/test_x.py::test_name`"
    missing = []
    for file, function in named:
        path = ROOT / file
        if not path.is_file():
            missing.append(file)
        elif function and function not in _test_functions(path):
            missing.append(f"{file}::{function}")
    assert not missing, f"the README names tests that do not exist: {missing}"
