"""The command line, ``python -m bench.soak``: parse the options into a :class:`SoakConfig`,
run the soak, write ``soak.json`` and ``soak.md``, and exit 1 when a condition fails."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import bench.soak
from bench.soak.config import SoakConfig
from bench.soak.report import format_markdown, write_report
from bench.soak.run import run_soak

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results"


def parse_args(argv: Sequence[str]) -> tuple[SoakConfig, Path, Path | None]:
    # --help describes the whole soak, which the package docstring does
    doc = bench.soak.__doc__ or ""
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=doc.splitlines()[0])
    d = SoakConfig()
    parser.add_argument("--runs", type=int, default=d.runs)
    parser.add_argument("--sessions", type=int, default=d.sessions)
    parser.add_argument("--kill-every-s", type=float, default=d.kill_every_s)
    parser.add_argument("--max-kills", type=int, default=None)
    parser.add_argument("--window", type=int, default=d.window, help="unresolved runs at most")
    parser.add_argument(
        "--rate-per-s",
        type=float,
        default=d.rate_per_s,
        help=f"runs offered per second (default {d.rate_per_s}; 0: as fast as workers take them)",
    )
    parser.add_argument("--workers", type=int, default=d.workers)
    parser.add_argument("--concurrency", type=int, default=d.concurrency, help="pool per worker")
    parser.add_argument("--retention-s", type=int, default=d.stream_retention_s)
    parser.add_argument("--result-ttl-s", type=int, default=d.result_ttl_s)
    parser.add_argument("--sample-every-s", type=float, default=d.sample_every_s)
    parser.add_argument("--max-memory-ratio", type=float, default=d.max_memory_ratio)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--log-dir", type=Path, default=None, help="worker and moto logs")
    args = parser.parse_args(list(argv))
    config = SoakConfig(
        runs=args.runs,
        sessions=args.sessions,
        kill_every_s=args.kill_every_s,
        max_kills=args.max_kills,
        window=args.window,
        rate_per_s=args.rate_per_s if args.rate_per_s > 0 else None,
        workers=args.workers,
        concurrency=args.concurrency,
        stream_retention_s=args.retention_s,
        result_ttl_s=args.result_ttl_s,
        sample_every_s=args.sample_every_s,
        max_memory_ratio=args.max_memory_ratio,
        seed=args.seed,
    )
    return config, args.out, args.log_dir


def main(argv: Sequence[str] | None = None) -> int:
    """Run the soak, write the reports, and return the exit status (1 when a condition fails)."""
    config, out, log_dir = parse_args(sys.argv[1:] if argv is None else argv)
    command = "python -m bench.soak " + " ".join(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="tether-soak-") as tmp:
        report = run_soak(config, log_dir or Path(tmp))
    write_report(report, out, command.strip())
    print(format_markdown(report, command.strip()))
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
