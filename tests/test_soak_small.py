"""The soak harness itself (``bench/soak/``) at a tiny size: it must find every run once, in
order, and count the bucket exactly, with a worker killed midway. The full soak is
``tests/test_soak_long.py`` (``make test-long``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import SoakConfig, format_markdown, key_kind, run_soak, write_report
from bench.soak.workload import Pacer


@pytest.mark.slow  # ~20 s of worker processes: the soak harness's own check, beside the soak
def test_a_tiny_soak_loses_nothing_and_counts_the_bucket(tmp_path: Path) -> None:
    config = SoakConfig(
        runs=300, sessions=30, window=20, kill_every_s=1.0, max_kills=1, sample_every_s=0,
        rate_per_s=100.0,
    )  # fmt: skip
    report = run_soak(config, tmp_path / "logs")
    audit = report.audit
    assert len(report.kills) == 1
    assert audit.resolved == 300 and audit.statuses == {"COMPLETED": 300}, audit.problems
    assert (audit.lost, audit.duplicated, audit.out_of_order, audit.missing_heads) == (0, 0, 0, 0)
    assert audit.s3_heads == 30
    assert not audit.s3_stray and not audit.s3_sessions_bad, audit.s3_sessions_bad
    assert len(audit.s3_sessions_off_rule) <= 1
    # 8 events per run, segments of at least 32: every session archived something
    assert audit.s3_segments_found >= 30
    assert audit.s3_objects_found == 30 + audit.s3_segments_found
    assert report.s3_ok and report.audit.runs_ok
    assert [s.label for s in report.checkpoints] == ["10%", "50%", "100%"]
    last = report.checkpoints[-1]
    assert last.runs_done == 300 and last.used_memory > 0
    assert last.census["meta"].keys == 30  # the census finds one stream meta per session
    assert set(last.worker_rss_kib) == {"soak1", "soak2"}
    # offered at 100 runs/s: the 270 runs after the first checkpoint took at least 2.7 s
    assert report.checkpoints[-1].elapsed_s - report.checkpoints[0].elapsed_s >= 2.6
    write_report(report, tmp_path / "out", "test")
    assert "| 100% | 300 |" in (tmp_path / "out" / "soak.md").read_text()
    assert "S3 objects" in format_markdown(report, "test")


def test_key_kinds() -> None:
    assert key_kind("tether:{default/s-1}:events") == "events"
    assert key_kind("tether:{default/s-1}:run:r-1") == "run"
    assert key_kind("tether:{default/s-1}:req:q-1") == "req"
    assert key_kind("tether:{default/~runs:7}:r-1") == "{t/~runs:*} run index"
    assert key_kind("tether:{~done:3}") == "{~done:*}"
    assert key_kind("tether:{~p:default/p-1:3}:done") == "{~p:*}:done"
    assert key_kind("tether:{~active:3}") == "{~active:*}"
    assert key_kind("tether-celery:unacked") == "broker:unacked"


class _Clock:
    """A clock the test moves: ``sleep`` advances it, ``stall`` jumps it."""

    def __init__(self) -> None:
        self.now_s = 100.0
        self.sent_at: list[float] = []

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, delay_s: float) -> None:
        self.now_s += delay_s


def test_the_pacer_never_bursts_to_make_up_a_stall() -> None:
    clock = _Clock()
    pacer = Pacer(10.0, clock=clock, sleep=clock.sleep)

    def send(count: int) -> None:
        for _ in range(count):
            pacer.wait()
            clock.sent_at.append(clock.now_s)
            pacer.sent()

    send(5)
    clock.now_s += 5.0  # the window was full for 5 s: 50 runs' worth of time lost
    send(12)
    after = [round(t - clock.sent_at[5], 3) for t in clock.sent_at[5:]]
    # one run makes up a sleep's overshoot; then the rate, not 50 runs at once
    assert after == [0.0, 0.0] + [round(0.1 * k, 3) for k in range(1, 11)]
    assert [round(t - 100.0, 3) for t in clock.sent_at[:5]] == [0.0, 0.1, 0.2, 0.3, 0.4]
