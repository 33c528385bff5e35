"""``python -m bench``: run the benchmark suite and write the table, JSON and plot.

    python -m bench                 # every measure, full sizes (~10 min on 2 cores)
    python -m bench --quick         # CI-sized smoke run (tiny sizes; numbers mean nothing)
    python -m bench --only P1,P3    # some measures
    python -m bench --out DIR       # where latest.md / latest.json / latency.png go
    python -m bench --only P10,P10r,P10e --name p10   # writes p10.md / p10.json instead

Written under ``bench/results`` (the default), the results are then published: ``python -m
bench.publish`` regenerates the README's performance table and docs/performance.md from them
(``--no-publish`` skips it).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from bench.core import FULL, QUICK, Bench, Measure, Sizes
from bench.measures import MEASURES
from bench.publish import PublishError, publish
from bench.report import command_line, machine_info, now_iso, write_reports
from bench.stack import start_stack

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke run)")
    parser.add_argument(
        "--only", default="", help=f"comma list of measure ids ({', '.join(MEASURES)})"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"output directory (default {DEFAULT_OUT}; with --quick a temporary directory)",
    )
    parser.add_argument("--log-dir", type=Path, default=None, help="worker/moto logs")
    parser.add_argument(
        "--size",
        action="append",
        default=[],
        metavar="FIELD=N",
        help="override one size (e.g. --size p11_cases=200); the results record the sizes used",
    )
    parser.add_argument(
        "--name", default="latest", help="base name of the .md/.json written (default latest)"
    )
    parser.add_argument(
        "--no-publish",
        action="store_true",
        help="do not regenerate the README table and docs/performance.md afterwards",
    )
    args = parser.parse_args(argv)
    wanted = [part.strip() for part in args.only.split(",") if part.strip()]
    unknown = [w for w in wanted if w not in MEASURES]
    if unknown:
        parser.error(f"unknown measure id(s) {unknown}; choose from {', '.join(MEASURES)}")
    args.selected = [m for m in MEASURES if not wanted or m in wanted]
    if args.out is None:
        quick_dir = Path(tempfile.gettempdir()) / "tether-bench-quick"
        args.out = quick_dir if args.quick else DEFAULT_OUT
    return args


def with_overrides(sizes: Sizes, overrides: list[str]) -> Sizes:
    """``sizes`` with ``FIELD=N`` overrides (refused, naming it, when a field is unknown)."""
    fields = {f.name: f.type for f in dataclasses.fields(Sizes)}
    changes: dict[str, float | int] = {}
    for item in overrides:
        name, _, text = item.partition("=")
        if name not in fields or not text:
            raise SystemExit(
                f"--size {item!r}: expected FIELD=N with FIELD one of {', '.join(fields)}"
            )
        changes[name] = float(text) if "float" in str(fields[name]) else int(text)
    return dataclasses.replace(sizes, **changes)  # type: ignore[arg-type]


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the selected measures; return 0 when every one of them produced a result."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    sizes = with_overrides(QUICK if args.quick else FULL, args.size)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="tether-bench-logs-"))
    started = time.monotonic()
    load_start = round(os.getloadavg()[0], 2)
    _say(f"starting the stack (logs in {log_dir})")
    # quick: one worker per side boots faster; the P2 note names the counts actually used
    workers = 1 if args.quick else 2
    stack = start_stack(log_dir, tether_workers=workers, baseline_workers=workers)
    measures: list[Measure] = []
    errors: dict[str, str] = {}
    try:
        bench = Bench(stack, sizes)
        _say(f"stack up in {time.monotonic() - started:.1f} s; measures {args.selected}")
        for measure_id in args.selected:
            t0 = time.monotonic()
            try:
                bench.fresh_bucket()
                measure = MEASURES[measure_id](bench)
            except Exception as exc:
                errors[measure_id] = f"{type(exc).__name__}: {exc}"
                _say(f"[{measure_id}] FAILED:\n{traceback.format_exc()}")
                continue
            measures.append(measure)
            verdict = {None: "info", True: "met", False: "MISSED"}[measure.met]
            _say(
                f"[{measure_id}] {time.monotonic() - t0:.1f} s: {measure.value:.3f} "
                f"({measure.value_of}), target {measure.target_text}: {verdict}"
            )
        meta = {
            "date": now_iso(),
            "command": command_line(argv),
            "quick": args.quick,
            "sizes": asdict(sizes),
            "duration_s": round(time.monotonic() - started, 1),
            "load_average_1m_start": load_start,
            "machine": machine_info(stack.redis_url),
            "errors": errors,
        }
    finally:
        stack.close()
    paths = write_reports(measures, meta, args.out, args.name)
    print(paths["markdown"].read_text())
    _say(f"wrote {', '.join(str(p) for p in paths.values())} in {meta['duration_s']} s")
    if args.out.resolve().is_relative_to(DEFAULT_OUT) and not args.no_publish:
        # the committed results changed: the tables quoting them follow (bench.publish)
        try:
            changed = publish()
        except PublishError as exc:
            _say(f"could not publish the results: {exc}")
            return 1
        _say("published: " + (", ".join(map(str, changed)) or "nothing changed"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
