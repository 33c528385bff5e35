"""The capacity model (``bench.capacity_model`` measures, ``bench.capacity_report`` projects):
the key census groups keys by kind, each figure is its formula over the measured costs, and
the measuring script runs end to end on a real stack (slow tier)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import capacity_report
from bench.capacity_model import key_kind
from bench.capacity_report import Load, model

REPO = Path(__file__).resolve().parent.parent


def test_key_kinds_replace_ids_and_keep_what_the_key_is() -> None:
    run = "run-ca323e4dbfa14520b4883c576b70c31d"
    assert key_kind(f"tether:{{default/s-1}}:run:{run}") == "tether:{default/<session>}:run:<run>"
    assert key_kind(f"tether:{{default/~runs:3}}:{run}") == "tether:{default/~runs:<n>}:<run>"
    assert key_kind("tether:{default/cap-echo-17}:events") == "tether:{default/<session>}:events"
    assert key_kind("tether:{~p:default/p-0123abcd}:done") == "tether:{~p:default/<producer>}:done"
    assert key_kind("tether:{~usage/acme}:20261207:runs") == "tether:{~usage/<tenant>}:<day>:runs"
    assert key_kind("tether:{~done}") == "tether:{~done}"
    assert key_kind("tether:{~done:7}") == "tether:{~done:<n>}"  # sharded feeds (#51 item 5)


def _document() -> dict[str, Any]:
    """A measured document with round numbers: 100 runs over 10 sessions."""
    workload = {
        "seconds": 10.0,
        "runs": 100,
        "redis_commands_net_of_idle": 50.0,
        "redis_commands": 55.0,
        "redis_in_bytes_net_of_idle": 4000.0,
        "redis_out_bytes_net_of_idle": 1000.0,
        "redis_cpu_s_net_of_idle": 0.001,
        "worker_cpu_s_net_of_idle": 0.02,
        "producer_cpu_s_net_of_idle": 0.001,
        "s3_requests": {"GET head": 0.1, "PUT head": 1.0, "PUT segment": 0.25},
    }
    census = {
        "t:{d/<session>}:run:<run>": {"keys": 100, "bytes": 150_000, "with_ttl": 100},
        "t:{d/~runs:<n>}:<run>": {"keys": 100, "bytes": 50_000, "with_ttl": 100},
        "t:{d/<session>}:events": {"keys": 10, "bytes": 300_000, "with_ttl": 0},
        "t:{d/<session>}:meta": {"keys": 10, "bytes": 3_000, "with_ttl": 0},
        "t:{d/<session>}:head": {"keys": 10, "bytes": 20_000, "with_ttl": 10},
        "t:{~done}": {"keys": 1, "bytes": 4_000, "with_ttl": 0},
        "t:{~done:<n>}": {"keys": 16, "bytes": 3_000, "with_ttl": 0},
        "t:{~usage/<tenant>}:<day>:runs": {"keys": 1, "bytes": 4_000, "with_ttl": 1},
        "t-celery:_kombu.binding.t": {"keys": 1, "bytes": 200, "with_ttl": 0},
    }
    for row in census.values():
        row["max_ttl_s"] = 60.0 if row["with_ttl"] else -0.001
    census["t:{~usage/<tenant>}:<day>:runs"]["max_ttl_s"] = 172_790.0  # about 2 days
    return {
        "measured": {
            "workloads": {"assistant": workload},
            "redis_census": census,
            "s3_census": {"head": {"objects": 10, "bytes": 100_000}, "segment": {"bytes": 200_000}},
            "runs_total": 100,
            "sessions_total": 10,
            "worker_rss_mib": {"main": [80.0], "pool_child": [90.0, 100.0]},
        }
    }


def test_every_figure_is_its_formula_over_the_measured_costs() -> None:
    load = Load(runs_per_day=8_640_000, sessions=1_000_000, peak_factor=2.0, run_s=4.0)
    result = model(_document(), load)
    assert load.mean_rate == 100.0 and load.peak_rate == 200.0
    redis = result["redis_defaults"]
    # run records: 2,000 B a run (150,000 + 50,000 over 100 runs), kept 7 days
    assert redis["bytes_per"]["run"] == 2_000
    assert math.isclose(redis["resident"]["run"], 8_640_000 * 7 * 2_000)
    # streams: 3,000 B a run, 8.64 runs a session a day, 30 days kept
    assert math.isclose(redis["resident"]["stream"], 1_000_000 * 8.64 * 30 * 3_000)
    assert redis["resident"]["session"] == 1_000_000 * 300  # :meta, no TTL
    assert math.isclose(redis["resident"]["transient"], 100 * 60 * 2_000)  # runs/s x TTL x B
    # completion feeds: 70 B a run, capped at DONE_MAX_LEN entries; usage ids: 40 B a run, 2 days
    assert math.isclose(redis["resident"]["feed"], 100_000 * 70)
    assert math.isclose(redis["resident"]["tenant_day"], 8_640_000 * 2 * 40)
    assert redis["resident"]["fixed"] == 200
    one_day = result["redis_one_day"]["resident"]
    assert math.isclose(one_day["run"], 8_640_000 * 2_000)
    assert redis["shards_for_memory"] == math.ceil(redis["total_bytes"] / 25e9)
    assert math.isclose(redis["redis_cores_at_peak"], 200 * 0.001)
    assert math.isclose(redis["commands_per_s_peak"], 200 * 50)
    workers = result["workers"]
    assert math.isclose(workers["cores_at_peak"], 200 * 0.02 / 0.7)
    assert workers["slots_at_peak"] == 800 and workers["pool_child_rss_mib"] == 100
    s3 = result["s3"]
    # a session's runs are hours apart in production: every run reads its head from S3
    assert s3["requests_per_run"]["GET head"] == 1.0 and s3["measured_get_head_per_run"] == 0.1
    assert math.isclose(s3["put_usd_month"], 8_640_000 * 30 * 1.25 / 1000 * 0.005)
    assert math.isclose(s3["get_usd_month"], 8_640_000 * 30 * 1.0 / 1000 * 0.0004)
    assert s3["head_bytes_per_session"] == 10_000 and s3["segment_bytes_per_run"] == 2_000


def test_the_page_gives_each_figure_with_its_formula(tmp_path: Path) -> None:
    document = {
        **_document(),
        "date": "2026-12-07",
        "command": "python -m bench.capacity_model",
        "duration_s": 60.0,
        "load_average_1m_start": 3.5,
        "uptime": "3.5 3.0 2.0 1/100 1",
        "machine": {
            "cpu_count": 2,
            "cpu_model": "x",
            "load_average_1m_end": 4.0,
            "git_commit": "c",
        },
    }
    (tmp_path / "capacity.json").write_text(json.dumps(document))
    assert capacity_report.main(["--results", str(tmp_path)]) == 0
    page = (tmp_path / "capacity.md").read_text()
    assert "load average (1 min) 3.5 at the start and 4.0 at the end" in page
    assert "| S3 PUT requests a month | runs/day x 30 x 1.25 | 375 M: **$1,875** |" in page
    assert "Redis memory, run records (defaults: 7 d, 30 d) | runs/day x TTL days x 2,000 B" in page


@pytest.mark.slow  # a real stack: `make test-long`
@pytest.mark.timeout(300)
def test_the_measuring_script_runs_on_a_real_stack(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.capacity_model", "--runs", "10", "--sessions", "2",
         "--workers", "1", "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    measured = json.loads((tmp_path / "capacity.json").read_text())["measured"]
    for name in ("echo", "assistant"):
        workload = measured["workloads"][name]
        assert workload["runs"] == 10 and workload["redis_commands"] > 0
        assert workload["s3_requests"].get("PUT head", 0) >= 1.0  # every run writes its head
    assert any(kind.endswith(":events") for kind in measured["redis_census"])
    assert "## The model" in (tmp_path / "capacity.md").read_text()
