"""Smoke run of the benchmark suite (``python -m bench --quick``): it runs end to end and writes
a table and JSON holding every measure with finite numbers. No timing is asserted: benchmark
figures are reported, never tested."""

from __future__ import annotations

import json
import math
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
@pytest.mark.timeout(90)
def test_quick_bench_writes_table_json_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out), "--log-dir",
         str(tmp_path / "logs")],
        cwd=REPO, capture_output=True, text=True, timeout=85, check=False,
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
