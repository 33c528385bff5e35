"""``python -m bench.tail_profile``: where the slowest 1% of P1's runs spend their time.

    python -m bench.tail_profile                       # 1000 runs each side, label "after"
    python -m bench.tail_profile --runs 300 --label before
    python -m bench.tail_profile --label after --record-p1 DIR/latest.json   # a P1 run's row

Runs P1's workload through the real stack (:func:`bench.stack.start_stack`: private Redis, moto
S3, two Tether and two hand-written-task workers, one pool child each): 1-step ``echo`` runs
with ``Producer.run`` interleaved with the hand-written task's ``apply_async().get()``, sessions
round robin, alternating which side goes first. Per run it keeps the client's latency and, from
the worker's log, the task's own time (Celery's ``succeeded in``); every process of the Tether
workers and the client logs its garbage collector's pauses (:mod:`bench.gc_probe`, on the wall
clock). For the slowest 1% of each side it lists the collections that overlapped the run.

Writes ``p1-tail.json`` and ``p1-tail.md`` (default ``bench/results``); each ``--label`` is kept
beside the others, so a ``before`` taken on an older commit and an ``after`` sit in one table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import baselines, gc_probe
from bench.core import RESULT_TIMEOUT_S, Stats, check_result, percentile
from bench.report import _git, machine_info, now_iso
from bench.stack import BenchStack, pool_children, start_stack

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
NAME = "p1-tail"
_SUCCEEDED = re.compile(
    r"Task (tether\.run|bench\.handwritten)\[([^\]]+)\] succeeded in ([0-9.e-]+)s"
)


@dataclass
class Run:
    """One timed run: which side, its task id, wall-clock start/end, latency."""

    side: str
    task_id: str
    start: float
    end: float
    latency_ms: float
    task_ms: float | None = None
    gc: list[dict[str, Any]] = field(default_factory=list)


def _tether(stack: BenchStack, sid: str, text: str) -> Run:
    start, t0 = time.time(), time.perf_counter()
    result = stack.producer.run(sid, text, agent="echo", wait_s=RESULT_TIMEOUT_S)
    latency_ms = (time.perf_counter() - t0) * 1000
    check_result(result, f"echo: {text}")
    return Run("tether", result.run_id, start, time.time(), latency_ms)


def _handwritten(sid: str, text: str) -> Run:
    start, t0 = time.time(), time.perf_counter()
    pending = baselines.handwritten.apply_async((sid, text))
    out = pending.get(timeout=RESULT_TIMEOUT_S)
    latency_ms = (time.perf_counter() - t0) * 1000
    if out["output"] != baselines.scripted_answer(text):
        raise RuntimeError(f"hand-written task answered {out!r} to {text!r}")
    return Run("baseline", str(pending.id), start, time.time(), latency_ms)


def measure(stack: BenchStack, runs: int, warmup: int, sessions: int, tag: str) -> list[Run]:
    """P1's interleaved workload; the warm-up runs are not returned."""
    baselines.configure(stack.redis_url)
    out: list[Run] = []
    for i in range(warmup + runs):
        sid, text = f"{tag}-tail-{i % sessions}", f"hello {i}"
        pair = (
            [_tether(stack, sid, text), _handwritten(sid, text)]
            if i % 2 == 0
            else [_handwritten(sid, text), _tether(stack, sid, text)]
        )
        if i >= warmup:
            out.extend(pair)
    return out


def _task_times(log_dir: Path) -> dict[str, float]:
    """Task id -> the task's own time (ms), from the workers' ``succeeded in`` log lines."""
    times: dict[str, float] = {}
    for path in log_dir.glob("*.log"):
        for match in _SUCCEEDED.finditer(path.read_text(errors="replace")):
            times[match.group(2)] = float(match.group(3)) * 1000
    return times


def _roles(stack: BenchStack, client_pid: int) -> dict[int, str]:
    roles = {client_pid: "client"}
    for worker in stack.tether.workers:
        if worker.pid is not None:
            roles[worker.pid] = f"{worker.name} main"
            for child in pool_children(worker.pid):
                roles[child] = f"{worker.name} pool child"
    return roles


def _attach(runs: list[Run], pauses: list[dict[str, Any]], roles: dict[int, str]) -> None:
    for run in runs:
        run.gc = [
            {**p, "role": roles.get(p["pid"], f"pid {p['pid']}")}
            for p in pauses
            if p["t0"] < run.end and p["t0"] + p["ms"] / 1000 > run.start
        ]


def _side_summary(runs: list[Run]) -> dict[str, Any]:
    latencies = [r.latency_ms for r in runs]
    stats = Stats.of(latencies)
    cut = percentile(latencies, 99)
    slow = sorted((r for r in runs if r.latency_ms >= cut), key=lambda r: -r.latency_ms)
    with_full_gc = [r for r in slow if any(p["gen"] == 2 for p in r.gc)]
    tasks = [r.task_ms for r in runs if r.task_ms is not None]
    return {
        "stats": asdict(stats),
        "task_ms_median": statistics.median(tasks) if tasks else None,
        "slowest_1pct": [
            {
                "latency_ms": round(r.latency_ms, 2),
                "task_ms": None if r.task_ms is None else round(r.task_ms, 2),
                "gc": [
                    {"role": p["role"], "gen": p["gen"], "ms": p["ms"]}
                    for p in sorted(r.gc, key=lambda p: -p["ms"])[:4]
                ],
            }
            for r in slow
        ],
        "slowest_1pct_with_full_gc": len(with_full_gc),
        "slowest_1pct_gc_ms_mean": round(
            statistics.fmean(sum(p["ms"] for p in r.gc) for r in slow), 2
        )
        if slow
        else 0.0,
    }


def _gc_summary(
    pauses: list[dict[str, Any]], roles: dict[int, str], seconds: float
) -> dict[str, Any]:
    by_role: dict[str, list[float]] = {}
    for p in pauses:
        if p["gen"] == 2:
            by_role.setdefault(roles.get(p["pid"], "other"), []).append(p["ms"])
    return {
        role: {
            "full_collections": len(ms),
            "per_minute": round(len(ms) / seconds * 60, 1),
            "median_ms": round(statistics.median(ms), 2),
            "max_ms": round(max(ms), 2),
        }
        for role, ms in sorted(by_role.items())
    }


def profile(runs: int, warmup: int, sessions: int, log_dir: Path) -> dict[str, Any]:
    """Start the stack with the probe, run the workload, and summarise it."""
    gc_dir = log_dir / "gc"
    env = {
        gc_probe.ENV_DIR: str(gc_dir),
        "TETHER_AGENT_MODULES": json.dumps(["bench.agents", "bench.gc_probe"]),
    }
    stack = start_stack(log_dir, env_extra=env)
    try:
        gc_probe.install(gc_dir)  # the client's own pauses count on both sides alike
        started = time.monotonic()
        timed = measure(stack, runs, warmup, sessions, tag=f"{int(time.time())}")
        seconds = time.monotonic() - started
        time.sleep(1.0)  # the last runs' log lines
        roles = _roles(stack, os.getpid())
        machine = machine_info(stack.redis_url)
    finally:
        stack.close()
    tasks = _task_times(log_dir)
    for run in timed:
        run.task_ms = tasks.get(run.task_id)
    pauses = gc_probe.read_pauses(gc_dir)
    _attach(timed, pauses, roles)
    sides = {side: [r for r in timed if r.side == side] for side in ("tether", "baseline")}
    summary = {side: _side_summary(rs) for side, rs in sides.items()}
    t, b = summary["tether"]["stats"], summary["baseline"]["stats"]
    return {
        "date": now_iso(),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "runs": runs,
        "warmup": warmup,
        "sessions": sessions,
        "median_ratio": round(t["median"] / b["median"], 3),
        "p95_ratio": round(t["p95"] / b["p95"], 3),
        "p99_ratio": round(t["p99"] / b["p99"], 3),
        "sides": summary,
        "full_gc": _gc_summary(pauses, roles, seconds),
        "load_average_1m_end": machine.get("load_average_1m_end"),
        "cpu_count": machine.get("cpu_count"),
    }


def p1_row(path: Path, label: str) -> dict[str, Any]:
    """P1's figures from a ``python -m bench --only P1`` result document (for the table of
    repeated P1 runs beside the profiles)."""
    document = json.loads(path.read_text())
    (m,) = [row for row in document["measures"] if row["id"] == "P1"]
    t, b = m["tether"], m["baseline"]
    return {
        "label": label,
        "date": document["date"],
        "commit": document["machine"]["git_commit"],
        "median_ratio": round(t["median"] / b["median"], 3),
        "p99_ratio": round(t["p99"] / b["p99"], 3),
        "tether_median_ms": round(t["median"], 2),
        "baseline_median_ms": round(b["median"], 2),
        "tether_p99_ms": round(t["p99"], 2),
        "baseline_p99_ms": round(b["p99"], 2),
        "load_1m": [
            document.get("load_average_1m_start"),
            document["machine"].get("load_average_1m_end"),
        ],
    }


def _p1_lines(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "## `python -m bench --only P1`, repeated",
        "",
        "P1's own figures (200 runs a side) of each run, with the machine's load average (1 min) "
        "at its start and end: other jobs shared the 2 CPUs.",
        "",
        "| label | commit | Tether median / p99 ms | hand-written median / p99 ms | median ratio "
        "| p99 ratio | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {r['commit']} | {r['tether_median_ms']:.1f} / "
            f"{r['tether_p99_ms']:.1f} | {r['baseline_median_ms']:.1f} / "
            f"{r['baseline_p99_ms']:.1f} | {r['median_ratio']:.2f}x | {r['p99_ratio']:.2f}x | "
            f"{r['load_1m'][0]} / {r['load_1m'][1]} |"
        )
    return lines


def markdown(document: dict[str, Any]) -> str:
    """The labelled profiles side by side, then each one's slowest runs."""
    labels = list(document["profiles"])
    lines = [
        "# P1's tail: where the slowest 1% of runs go",
        "",
        "Written by `python -m bench.tail_profile` (P1's workload on the real stack; garbage "
        "collector pauses from `gc.callbacks` in the Tether workers' processes and the client, "
        "on the wall clock; a task's own time from Celery's `succeeded in`). Other jobs shared "
        "the 2 CPUs (the load in the last column): medians move with it, on both sides; what a "
        "profile shows is which collections the slowest runs contain.",
        "",
        "| label | commit | runs | Tether median / p99 ms | hand-written median / p99 ms "
        "| median ratio | p99 ratio | slowest 1% with a full GC | full GCs in pool children "
        "| load at the end |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label in labels:
        p = document["profiles"][label]
        t, b = p["sides"]["tether"], p["sides"]["baseline"]
        children = [v for k, v in p["full_gc"].items() if "pool child" in k]
        full = sum(v["full_collections"] for v in children)
        worst = max((v["max_ms"] for v in children), default=0.0)
        lines.append(
            f"| {label} | {p['commit']} | {p['runs']} | {t['stats']['median']:.1f} / "
            f"{t['stats']['p99']:.1f} | {b['stats']['median']:.1f} / {b['stats']['p99']:.1f} | "
            f"{p['median_ratio']:.2f}x | {p['p99_ratio']:.2f}x | "
            f"{t['slowest_1pct_with_full_gc']} of {len(t['slowest_1pct'])} | "
            f"{full} (longest {worst:.1f} ms) | {p.get('load_average_1m_end', '?')} |"
        )
    lines += _p1_lines(document.get("p1_runs", []))
    for label in labels:
        p = document["profiles"][label]
        lines += ["", f"## {label}: the slowest 1% of Tether's runs", ""]
        for run in p["sides"]["tether"]["slowest_1pct"]:
            gcs = ", ".join(f"{g['role']} gen{g['gen']} {g['ms']:.1f} ms" for g in run["gc"])
            task = "?" if run["task_ms"] is None else f"{run['task_ms']:.1f}"
            lines.append(
                f"- {run['latency_ms']:.1f} ms (task {task} ms); collections: {gcs or 'none'}"
            )
        lines += ["", "Full collections per process kind:", ""]
        for role, v in p["full_gc"].items():
            lines.append(
                f"- {role}: {v['full_collections']} ({v['per_minute']}/min), median "
                f"{v['median_ms']} ms, longest {v['max_ms']} ms"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tail_profile", description=__doc__)
    parser.add_argument("--runs", type=int, default=1000, help="timed runs per side")
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--label", default="after")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--record-p1",
        type=Path,
        action="append",
        default=[],
        metavar="JSON",
        help="add the P1 row of a `python -m bench --only P1` result (under --label) instead "
        "of profiling",
    )
    args = parser.parse_args(argv)
    path = args.out / f"{NAME}.json"
    document: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {"profiles": {}}
    if args.record_p1:
        rows = document.setdefault("p1_runs", [])
        rows.extend(p1_row(p, args.label) for p in args.record_p1)
    else:
        log_dir = Path(tempfile.mkdtemp(prefix="tether-tail-"))
        document["profiles"][args.label] = profile(args.runs, args.warmup, args.sessions, log_dir)
        print(f"logs in {log_dir}", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n")
    (args.out / f"{NAME}.md").write_text(markdown(document))
    print(markdown(document))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
