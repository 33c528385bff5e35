"""``python -m bench.cli_startup``: how long ``tether --help`` takes, beside ``python -c pass``.

    python -m bench.cli_startup                   # 30 runs of each command, interleaved
    python -m bench.cli_startup --runs 100        # more runs
    python -m bench.cli_startup --tether PATH     # another install's console script (a before)
    python -m bench.cli_startup --out DIR         # where cli_startup.json / .md go

Every run is a fresh process: the wall time from spawning it to its exit
(``time.perf_counter`` around ``subprocess.run``, output to /dev/null), and its CPU time (user +
system, from ``RUSAGE_CHILDREN``). The commands take turns, one run of each per round, and the
order rotates from round to round, so a burst of load on the machine hits them alike:

- C1: ``tether --help`` (the installed console script), against ``python -c pass`` from the
  same interpreter (what any Python command costs): target median <= 300 ms;
- C2: ``tether run --help``, a command's help (information, no target): before any
  subcommand runs, typer 0.29 coerces the group's unset ``--help`` flag (``None``) through a
  pydantic ``TypeAdapter``, which imports pydantic (~0.09 s); ``tether --help`` does not.

The difference of the medians is what Tether and its CLI cost over the bare interpreter. Writes
``bench/results/cli_startup.json`` and ``cli_startup.md``; written there (the default), the
results are then published (``python -m bench.publish``: a row in the README's table and a
section of docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.core import Measure, Stats, Target
from bench.report import dump_json, header, host_info, now_iso, to_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
JSON_NAME, MD_NAME = "cli_startup.json", "cli_startup.md"
DEFAULT_RUNS = 30
#: Untimed runs of each command first: the first start compiles .pyc files and fills the page
#: cache, which no later start pays.
DEFAULT_WARMUP = 3
TARGET_MS = 300.0
RUN_TIMEOUT_S = 60.0
PACKAGES = ("tether", "typer", "click", "rich", "pydantic", "celery", "redis", "boto3")


@dataclass(frozen=True)
class Command:
    """One command to time, under the name its series takes in the JSON."""

    key: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class Sample:
    """One fresh process: wall and CPU milliseconds."""

    wall_ms: float
    cpu_ms: float


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_once(command: Command) -> Sample:
    """Start ``command`` once and wait for it; fail unless it exits 0.

    Runs are sequential, so the growth of ``RUSAGE_CHILDREN`` across one run is that run's
    process alone.
    """
    cpu0 = _children_cpu_s()
    start = time.perf_counter()
    done = subprocess.run(
        command.argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    wall_s = time.perf_counter() - start
    cpu_s = _children_cpu_s() - cpu0
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command.argv)} exited {done.returncode}: {done.stderr.decode()[-500:]}"
        )
    return Sample(wall_ms=wall_s * 1000.0, cpu_ms=cpu_s * 1000.0)


def interleaved(commands: Sequence[Command], runs: int, warmup: int) -> dict[str, list[Sample]]:
    """``runs`` timed runs of every command, one of each per round, the order rotating by one
    each round (after ``warmup`` untimed rounds)."""
    samples: dict[str, list[Sample]] = {c.key: [] for c in commands}
    for round_no in range(warmup + runs):
        shift = round_no % len(commands)
        for command in [*commands[shift:], *commands[:shift]]:
            sample = time_once(command)
            if round_no >= warmup:
                samples[command.key].append(sample)
    return samples


def _check_help(argv: Sequence[str]) -> None:
    """The timed command really prints tether's help (not an error that exits 0 quickly)."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    if done.returncode != 0 or "Usage: tether" not in done.stdout:
        raise RuntimeError(f"{' '.join(argv)} did not print tether's help: {done.stderr[-500:]}")


def measures(samples: dict[str, list[Sample]], runs: int, warmup: int) -> list[Measure]:
    """C1 (``tether --help``) and C2 (``tether run --help``), each against ``python -c pass``."""
    base = [s.wall_ms for s in samples["python_pass"]]
    base_stats = Stats.of(base)
    base_cpu = Stats.of([s.cpu_ms for s in samples["python_pass"]])
    rows = []
    for measure_id, key, name, target in (
        ("C1", "tether_help", "`tether --help`, a fresh process", Target("<=", TARGET_MS, "ms")),
        ("C2", "tether_run_help", "`tether run --help`, a fresh process (info)", None),
    ):
        wall = [s.wall_ms for s in samples[key]]
        stats, cpu = Stats.of(wall), Stats.of([s.cpu_ms for s in samples[key]])
        rows.append(
            Measure(
                id=measure_id,
                name=name,
                unit="ms",
                tether=stats,
                baseline=base_stats,
                baseline_name="`python -c pass`, the same interpreter",
                value=stats.median,
                value_of="median wall time",
                target=target,
                value_unit="ms",
                note=(
                    f"{runs} runs of each command after {warmup} untimed round(s), interleaved; "
                    f"over `python -c pass`: +{stats.median - base_stats.median:.1f} ms median, "
                    f"+{stats.p95 - base_stats.p95:.1f} ms p95; CPU (user + system) median "
                    f"{cpu.median:.1f} ms against {base_cpu.median:.1f} ms"
                ),
                extra={
                    "median_difference_ms": stats.median - base_stats.median,
                    "p95_difference_ms": stats.p95 - base_stats.p95,
                    "cpu_median_ms": cpu.median,
                    "cpu_p95_ms": cpu.p95,
                    "baseline_cpu_median_ms": base_cpu.median,
                    "baseline_cpu_p95_ms": base_cpu.p95,
                },
                series={
                    f"{key}_ms": [round(v, 3) for v in wall],
                    "python_pass_ms": [round(v, 3) for v in base],
                },
            )
        )
    return rows


def markdown(rows: Sequence[Measure], meta: dict[str, Any]) -> str:
    """The result table with its date, command and machine (``cli_startup.md``; the docs quote
    it through ``bench.publish``)."""
    machine = meta["machine"]
    pkgs = machine["packages"]
    lines = [
        *header(
            meta,
            f"{machine['platform']}; Python {machine['python']}; typer {pkgs['typer']}, "
            f"click {pkgs['click']}, rich {pkgs['rich']}, pydantic {pkgs['pydantic']}",
        ),
        "Wall time of a fresh process, median / p95; the commands take turns.",
        "",
        "| id | command | wall | `python -c pass` | difference | CPU | target | |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in rows:
        base = m.baseline
        assert base is not None  # every C measure runs beside `python -c pass`
        verdict = "info" if m.met is None else ("met" if m.met else "**missed**")
        lines.append(
            f"| {m.id} | {m.name} | {_pair(m.tether.median, m.tether.p95)} | "
            f"{_pair(base.median, base.p95)} | "
            f"+{m.extra['median_difference_ms']:.1f} / +{m.extra['p95_difference_ms']:.1f} ms | "
            f"{_pair(float(m.extra['cpu_median_ms']), float(m.extra['cpu_p95_ms']))} | "
            f"{m.target or '-'} | {verdict} |"
        )
    lines += ["", *(f"- **{m.id}**: {m.note}." for m in rows)]
    return "\n".join(lines) + "\n"


def _pair(median: float, p95: float) -> str:
    return f"{median:.1f} / {p95:.1f} ms"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.cli_startup", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="timed runs per command")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help="untimed rounds first")
    parser.add_argument(
        "--tether",
        type=Path,
        default=Path(sys.executable).with_name("tether"),
        help="the console script to time (default: the one beside this Python)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument(
        "--no-publish", action="store_true", help="do not regenerate the README and docs tables"
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be at least 1 and --warmup at least 0")
    if not args.tether.is_file():
        parser.error(f"{args.tether} is missing: install Tether (`make .venv/.installed`)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Time the commands, print and write the table (a missed target is in the table, as for
    ``python -m bench``; 1 only when the results could not be published)."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    script = str(args.tether)
    # the script's own interpreter (its #! line) runs `python -c pass`, so both start the same
    python = Path(script).with_name("python")
    commands = [
        Command("python_pass", (str(python) if python.exists() else sys.executable, "-c", "pass")),
        Command("tether_help", (script, "--help")),
        Command("tether_run_help", (script, "run", "--help")),
    ]
    _check_help([script, "--help"])
    load_start = round(os.getloadavg()[0], 2)
    started = time.monotonic()
    samples = interleaved(commands, args.runs, args.warmup)
    rows = measures(samples, args.runs, args.warmup)
    meta = {
        "date": now_iso(),
        "command": " ".join(["python -m bench.cli_startup", *argv]),
        "runs": args.runs,
        "warmup": args.warmup,
        "commands": {c.key: " ".join([Path(c.argv[0]).name, *c.argv[1:]]) for c in commands},
        "duration_s": round(time.monotonic() - started, 1),
        "load_average_1m_start": load_start,
        "machine": host_info(PACKAGES),
    }
    text = markdown(rows, meta)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / MD_NAME).write_text(text)
    (args.out / JSON_NAME).write_text(dump_json(to_json(rows, meta)))
    print(text)
    print(f"wrote {args.out / MD_NAME} and {JSON_NAME}", file=sys.stderr)
    if args.out.resolve() == DEFAULT_OUT and not args.no_publish:
        # bench.publish quotes this module's table: imported here, not at the top, to keep the
        # two modules from importing each other at load time
        from bench.publish import PublishError, publish

        try:
            changed = publish()
        except PublishError as exc:
            print(f"could not publish the results: {exc}", file=sys.stderr)
            return 1
        print("published: " + (", ".join(map(str, changed)) or "nothing changed"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
