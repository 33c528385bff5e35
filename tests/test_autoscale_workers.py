"""Autoscaling on real worker processes: ``tether autoscale`` (a subprocess) meets a burst of runs
at one worker, scales out to MAX, the queue drains, and it scales back to MIN after its idle
period; no run is lost or duplicated and no completed step is redone (tool effects counted per
``(run, step)`` in Redis, final answers per session in the store).

The scenario is :func:`bench.autoscale.run_scenario`; ``python -m bench.autoscale`` runs it at
full size and checks the timing targets (10 s to MAX, 30 s back to MIN), which a test must not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.autoscale import Figures, run_scenario


def _check(figures: Figures) -> None:
    lines = "\n".join(figures.supervisor)
    assert f"workers 1 -> {figures.max_workers}" in lines  # one step to the maximum
    assert figures.peak_workers == figures.max_workers, lines
    assert figures.to_max_s is not None  # MAX workers were live together
    assert figures.completed == figures.runs and figures.lost == 0
    assert figures.back_to_min_s is not None, lines  # back at MIN once idle
    assert "scale in" in lines
    assert figures.duplicated == 0
    assert figures.redone_steps == 0 and figures.missing_steps == 0
    assert figures.extra_model_calls == 0


def test_a_burst_scales_out_to_max_drains_and_returns_to_min(tmp_path: Path) -> None:
    _check(run_scenario(tmp_path, runs=45, min_workers=1, max_workers=3, idle_s=3))


@pytest.mark.slow
def test_four_hundred_runs_at_one_worker(tmp_path: Path) -> None:
    _check(run_scenario(tmp_path, runs=400, min_workers=1, max_workers=4, idle_s=15))
