"""Issue #19's soak at full size (``make test-long``): 100,000 runs over 5,000 sessions with
retention on and a worker SIGKILLed every minute; Redis memory at the end within 1.2x of the
memory at 10% of the runs, nothing lost or duplicated, the bucket exactly as expected.

About an hour on 2 CPUs (runs offered at 30/s). ``TETHER_SOAK_RUNS`` / ``TETHER_SOAK_SESSIONS`` /
``TETHER_SOAK_KILL_EVERY_S`` shrink it for a local check (the memory ratio only means something
once 10% of the runs take longer than the 60 s retention windows). The report goes to
``bench/results/soak.{json,md}`` only from ``python -m bench.soak``; here it goes to the test's
temporary directory and its table is printed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.soak import SoakConfig, format_markdown, run_soak, write_report

pytestmark = pytest.mark.slow


@pytest.mark.timeout(3 * 3600)
def test_soak(tmp_path: Path) -> None:
    config = SoakConfig(
        runs=int(os.environ.get("TETHER_SOAK_RUNS", "100000")),
        sessions=int(os.environ.get("TETHER_SOAK_SESSIONS", "5000")),
        kill_every_s=float(os.environ.get("TETHER_SOAK_KILL_EVERY_S", "60")),
    )
    report = run_soak(config, tmp_path / "logs")
    write_report(report, tmp_path, "tests/test_soak_long.py")
    print(format_markdown(report, "tests/test_soak_long.py"))
    audit = report.audit
    assert audit.runs_ok, report.failures()
    assert (audit.lost, audit.duplicated) == (0, 0)
    assert report.s3_ok, (audit.s3_sessions_bad[:5], audit.s3_stray[:5])
    assert len(report.kills) >= 1
    assert report.memory_ratio <= config.max_memory_ratio, report.failures()
