"""``python -m bench.autoscale``: repeat the autoscaling scenario, measure the fixed-fleet
baselines in the same run, check the targets, write ``bench/results/autoscale.json|md``.

    python -m bench.autoscale                               # 400 runs, 1:4, 3 repeats, baselines
    python -m bench.autoscale --runs 60 --max 3 --idle-s 3 --repeat 1 --no-baseline

Per figure the median and p95 (nearest rank: with 3 repeats, the worst) over the repeats. The
baselines are the same burst drained by fixed fleets started beforehand: MIN workers (no
autoscaling) and MAX workers (as if MAX were always on), so the ratios say what autoscaling
gains over MIN and what it costs against MAX.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.autoscale import (
    DEFAULT_OUT,
    TARGET_BACK_TO_MIN_S,
    TARGET_TO_MAX_S,
    Figures,
    fixed_fleet_drain_s,
    run_scenario,
)
from bench.autoscale_agents import STEPS

TIMED = ("to_max_s", "back_to_min_s", "drain_s")
COUNTED = ("lost", "duplicated", "redone_steps", "missing_steps", "extra_model_calls")


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def summarize(runs: list[Figures]) -> dict[str, Any]:
    """Median and p95 of each timed figure (None when a repeat never reached it: the worst),
    the sums of the counted ones, the peak worker count."""
    summary: dict[str, Any] = {}
    for name in TIMED:
        values = [getattr(f, name) for f in runs]
        if any(v is None for v in values):
            summary[name] = {"median": None, "p95": None, "values": values}
        else:
            summary[name] = {
                "median": round(statistics.median(values), 2),
                "p95": _p95(values),
                "values": values,
            }
    for name in COUNTED:
        summary[name] = sum(getattr(f, name) for f in runs)
    summary["completed"] = sum(f.completed for f in runs)
    summary["peak_workers"] = max(f.peak_workers for f in runs)
    return summary


def targets_met(summary: dict[str, Any]) -> bool:
    """Every repeat reached MAX within 10 s and MIN within 30 s, nothing lost or redone."""
    to_max, back = summary["to_max_s"]["p95"], summary["back_to_min_s"]["p95"]
    return (
        to_max is not None
        and to_max <= TARGET_TO_MAX_S
        and back is not None
        and back <= TARGET_BACK_TO_MIN_S
        and all(summary[name] == 0 for name in COUNTED)
    )


def _timed(summary: dict[str, Any], name: str) -> str:
    cell = summary[name]
    return "not reached" if cell["median"] is None else f"{cell['median']} / {cell['p95']} s"


def markdown(doc: dict[str, Any]) -> str:
    """The results page."""
    s, a = doc["summary"], doc["args"]
    base = doc["baselines"]
    lines = [
        "# Autoscaling on real workers", "",
        f"`{doc['command']}` on {doc['machine']}, {doc['date']}.", "",
        f"{a['runs']} runs of a {STEPS}-step agent submitted at once to {a['min_workers']} "
        f"worker; `tether autoscale --min {a['min_workers']} --max {a['max_workers']} "
        f"--idle-s {a['idle_s']}`; {a['repeat']} repeat(s), median / p95.", "",
        "| figure | median / p95 | target |", "| --- | --- | --- |",
        f"| submit -> {a['max_workers']} workers live | {_timed(s, 'to_max_s')} | <= 10 s |",
        f"| last result -> {a['min_workers']} worker live (idle period included) | "
        f"{_timed(s, 'back_to_min_s')} | <= 30 s |",
        f"| submit -> last result (drain) | {_timed(s, 'drain_s')} | - |",
        f"| peak workers | {s['peak_workers']} | {a['max_workers']} |",
        f"| runs completed / lost / duplicated | {s['completed']} / {s['lost']} / "
        f"{s['duplicated']} | all / 0 / 0 |",
        f"| steps redone / missing, extra model calls | {s['redone_steps']} / "
        f"{s['missing_steps']}, {s['extra_model_calls']} | 0 / 0, 0 |",
    ]  # fmt: skip
    if base:
        lines += [
            "", "Baselines, the same burst on a fixed fleet started beforehand (drain time):", "",
            "| fleet | drain | autoscaled drain (median) vs it |", "| --- | --- | --- |",
            *(f"| {k} fixed worker(s) | {v} s | {s['drain_s']['median'] / v:.2f}x |"
              for k, v in base.items() if s["drain_s"]["median"] is not None),
        ]  # fmt: skip
    lines += ["", "Targets met: " + ("yes" if doc["targets_met"] else "NO"), ""]
    lines += ["Supervisor (last repeat):", "", "```", *doc["supervisor"], "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.autoscale", description=__doc__)
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--min", type=int, default=1, dest="min_workers")
    parser.add_argument("--max", type=int, default=4, dest="max_workers")
    parser.add_argument("--idle-s", type=float, default=15.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="tether-autoscale-"))
    runs = []
    for i in range(args.repeat):
        figures = run_scenario(workdir / f"r{i}", runs=args.runs, min_workers=args.min_workers,
                               max_workers=args.max_workers, idle_s=args.idle_s)  # fmt: skip
        print(json.dumps({k: v for k, v in asdict(figures).items() if k != "supervisor"}))
        runs.append(figures)
    baselines: dict[str, float] = {}
    if not args.no_baseline:
        for workers in sorted({max(1, args.min_workers), args.max_workers}):
            baselines[str(workers)] = fixed_fleet_drain_s(
                workdir / f"fixed{workers}", runs=args.runs, workers=workers
            )
    summary = summarize(runs)
    command = "python -m bench.autoscale " + " ".join(argv if argv is not None else sys.argv[1:])
    doc: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command.strip(),
        "machine": f"{os.cpu_count()} CPUs, {platform.platform()}",
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "targets": {"to_max_s": TARGET_TO_MAX_S, "back_to_min_s": TARGET_BACK_TO_MIN_S},
        "summary": summary,
        "baselines": baselines,
        "targets_met": targets_met(summary),
        "repeats": [{k: v for k, v in asdict(f).items() if k != "supervisor"} for f in runs],
        "supervisor": runs[-1].supervisor,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "autoscale.json").write_text(json.dumps(doc, indent=2) + "\n")
    (args.out / "autoscale.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0 if doc["targets_met"] else 1
