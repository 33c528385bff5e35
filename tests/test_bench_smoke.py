"""Smoke run of the benchmark suite (``python -m bench --quick``): it runs end to end and writes
a table and JSON holding every measure with finite numbers. No timing is asserted: benchmark
figures are reported, never tested."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.measures import MEASURES

REPO = Path(__file__).resolve().parent.parent


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return []


@pytest.mark.slow  # a long variant: `make test-long` (keeps `make test` under 10 min)
@pytest.mark.timeout(300)  # 178 s at load 17 on 2 cores, P14's short variant ~40 s, P11's ~15 s
def test_quick_bench_writes_table_json_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--out",
            str(out),
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=295,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]

    doc = json.loads((out / "latest.json").read_text())
    ids = [m["id"] for m in doc["measures"]]
    assert ids == list(MEASURES)
    assert doc["errors"] == {}
    assert doc["command"] == f"python -m bench --quick --out {out} --log-dir {tmp_path / 'logs'}"
    assert doc["machine"]["cpu_count"] >= 1 and doc["machine"]["redis_server"]
    for measure in doc["measures"]:
        for key in ("value", "tether"):
            assert measure[key] is not None, (measure["id"], key)
        numbers = _numbers(measure)
        assert numbers and all(math.isfinite(n) for n in numbers), measure["id"]
        assert measure["tether"]["n"] >= 1

    table = (out / "latest.md").read_text()
    for measure_id in MEASURES:
        assert f"| {measure_id} |" in table
    assert (out / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(120)
def test_cli_startup_bench_writes_table_and_json_that_publish_quotes(tmp_path: Path) -> None:
    """``python -m bench.cli_startup`` with two runs: both measures, finite numbers, one sample
    per run in each series; ``bench.publish`` on a copy of the pages puts its rows in them."""
    from bench import publish

    results = tmp_path / "bench" / "results"
    shutil.copytree(REPO / "bench" / "results", results)
    (results / "cli_startup.json").unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "bench.cli_startup", "--runs", "2", "--warmup", "0",
         "--out", str(results)],
        cwd=REPO, capture_output=True, text=True, timeout=110, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads((results / "cli_startup.json").read_text())
    assert [m["id"] for m in doc["measures"]] == ["C1", "C2"]
    for measure in doc["measures"]:
        assert all(math.isfinite(n) for n in _numbers(measure)), measure["id"]
        assert measure["tether"]["n"] == measure["baseline"]["n"] == 2
        assert all(len(series) == 2 for series in measure["series"].values())
    assert measure["extra"]["median_difference_ms"] > 0  # tether does more than `pass`
    assert "| C1 |" in (results / "cli_startup.md").read_text()

    for name in ("README.md", "docs/performance.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "docs" / "img" / "perf", tmp_path / "docs" / "img" / "perf")
    assert publish.main(["--root", str(tmp_path)]) == 0
    assert "| C1 | `tether --help`" in (tmp_path / "README.md").read_text()
    page = (tmp_path / "docs" / "performance.md").read_text()
    assert "From `bench/results/cli_startup.json`." in page
    assert "### C1" not in page  # not listed again among the earlier `python -m bench` runs


def test_a_size_override_changes_one_field_and_an_unknown_one_is_refused() -> None:
    from bench.__main__ import with_overrides
    from bench.core import QUICK

    sizes = with_overrides(QUICK, ["p11_cases=7", "p10_interval_s=0.5"])
    assert (sizes.p11_cases, sizes.p10_interval_s, sizes.p11_epochs) == (7, 0.5, QUICK.p11_epochs)
    with pytest.raises(SystemExit, match="p11_case"):
        with_overrides(QUICK, ["p11_case=7"])


@pytest.mark.timeout(120)
def test_agents_session_bench_runs_both_ways_side_by_side(tmp_path: Path) -> None:
    """``python -m bench.agents_session --quick``: the P13 rows (each call in its own
    ``asyncio.run``, and the ``L`` rows in one event loop), with finite figures for both sides."""
    pytest.importorskip("agents", reason="needs the optional extra: pip install 'tether[agents]'")
    proc = subprocess.run(
        [sys.executable, "-m", "bench.agents_session", "--quick", "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=110, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads((tmp_path / "p13.json").read_text())
    ids = [m["id"] for m in doc["measures"]]
    per_call = ["P13", "P13b", "P13g", "P13l"]
    assert ids == [*per_call, *(f"{i}L" for i in per_call), "P13fL", "P13u", "P13bu"]
    for measure in doc["measures"]:
        assert measure["tether"]["n"] == measure["baseline"]["n"] == 5, measure["id"]
        numbers = _numbers(measure)
        assert numbers and all(math.isfinite(n) for n in numbers), measure["id"]
    assert "one event loop" in (tmp_path / "p13.md").read_text()
