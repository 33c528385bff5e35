"""Reproduce the reliability figures of docs/guarantees.md (the chaos section).

    .venv/bin/python -m tests.chaos_report            # full size: 500 runs, 50 sessions, 20 kills
    .venv/bin/python -m tests.chaos_report --ci       # the CI size (120 runs, 12 sessions, 4 kills)

It starts its own stack (a password-protected redis-server, moto S3 behind the fault proxy, three
Celery worker processes) with Tether's default lease settings (10 s TTL, 1 s sweep; ``--short``
uses 2 s / 0.2 s), runs the chaos workload of :mod:`tests.support.chaos_engine`, then runs the
fuzz tests (``tests/test_hostile_input.py``, ``tests/test_security.py``) and prints one Markdown
table. The exit status is 0 only when nothing was lost, duplicated, reordered or left unresolved,
every session verified, and no fuzz case crashed.
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.chaos_engine import ChaosFigures, run_chaos
from tests.support.chaos_stack import (
    DEFAULT_LEASE_TTL_MS,
    DEFAULT_SWEEP_INTERVAL_MS,
    SHORT_LEASE_TTL_MS,
    SHORT_SWEEP_INTERVAL_MS,
    open_chaos_stack,
)

ROOT = Path(__file__).resolve().parents[1]
_FUZZ_LINE = re.compile(r"FUZZ (?P<name>.+?) cases=(?P<cases>\d+) crashes=(?P<crashes>\d+)")


def run_fuzz() -> tuple[list[tuple[str, int, int]], int]:
    """Run the fuzz tests; return ``(name, cases, crashes)`` per fuzz test and pytest's status."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            "tests/test_hostile_input.py",
            "tests/test_security.py",
            "-k",
            "fuzz",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    found = [
        (m["name"], int(m["cases"]), int(m["crashes"])) for m in _FUZZ_LINE.finditer(proc.stdout)
    ]
    return found, proc.returncode


def table(figures: ChaosFigures, fuzz: list[tuple[str, int, int]], command: str) -> str:
    """The guarantees table in Markdown."""
    rows = figures.rows()
    if fuzz:
        rows.append(
            (
                "fuzz cases (hostile requests, messages, CLI arguments, ids)",
                str(sum(c for _, c, _ in fuzz)),
            )
        )
        rows.append(
            ("fuzz cases that crashed or got an unclear error", str(sum(x for _, _, x in fuzz)))
        )
        rows += [
            (f"  - {name}", f"{cases} cases, {crashes} crashes") for name, cases, crashes in fuzz
        ]
    lines = ["| figure | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    lines.append("")
    lines.append(f"Reproduce: `{command}`")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run everything and print the table."""
    parser = argparse.ArgumentParser(prog="python -m tests.chaos_report", description=__doc__)
    parser.add_argument("--ci", action="store_true", help="CI size: 120 runs, 12 sessions, 4 kills")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--sessions", type=int, default=None)
    parser.add_argument("--kills", type=int, default=None)
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--short", action="store_true", help="2 s lease TTL, 0.2 s sweep")
    parser.add_argument("--no-fuzz", action="store_true", help="skip the fuzz tests")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    runs = args.runs or (120 if args.ci else 500)
    sessions = args.sessions or (12 if args.ci else 50)
    kills = args.kills if args.kills is not None else (4 if args.ci else 20)
    ttl_ms = SHORT_LEASE_TTL_MS if args.short else DEFAULT_LEASE_TTL_MS
    sweep_ms = SHORT_SWEEP_INTERVAL_MS if args.short else DEFAULT_SWEEP_INTERVAL_MS
    print(
        f"chaos: {runs} runs / {sessions} sessions / {kills} SIGKILLs, lease TTL {ttl_ms} ms, "
        f"sweep {sweep_ms} ms ...",
        file=sys.stderr,
        flush=True,
    )
    with (
        tempfile.TemporaryDirectory(prefix="tether-chaos-") as log_dir,
        open_chaos_stack(Path(log_dir), lease_ttl_ms=ttl_ms, sweep_interval_ms=sweep_ms) as stack,
    ):
        figures = run_chaos(
            stack, runs=runs, sessions=sessions, kills=kills, seed=args.seed, gap_s=(0.5, 2.0)
        )
    fuzz: list[tuple[str, int, int]] = []
    fuzz_status = 0
    if not args.no_fuzz:
        print("fuzz tests ...", file=sys.stderr, flush=True)
        fuzz, fuzz_status = run_fuzz()
    command = "python -m tests.chaos_report " + " ".join(argv if argv is not None else sys.argv[1:])
    text = table(figures, fuzz, command.strip())
    print(text)
    for problem in figures.failed[:10] + figures.verify_problems[:10]:
        print(f"problem: {problem}", file=sys.stderr)
    if args.out is not None:
        args.out.write_text(text + "\n")
    ok = figures.ok and figures.kills == kills and fuzz_status == 0
    ok = ok and not any(crashes for _, _, crashes in fuzz)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
