"""P9: a producer's CPU per completed run does not grow with the number of producers.

Each producer reads only its own completion feed (``<ns>:{~p:<tenant>/<id>}:done``), so 8
producers running at once cost each of them what one producer alone costs. Measured with real
producer processes (``python -m bench.producer_cpu``), their own CPU time from ``getrusage``.
"""

from __future__ import annotations

import json
import subprocess
import sys

from bench.core import Bench, Measure, Stats, Target


def _producers(bench: Bench, count: int, runs: int, label: str) -> list[float]:
    """CPU milliseconds per completed run of each of ``count`` producers run at once."""
    command = [sys.executable, "-m", "bench.producer_cpu", "--runs", str(runs)]
    procs = [
        subprocess.Popen(
            [*command, "--tag", bench.sid(label, ""), "--index", str(i)],
            env=bench.stack.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    out: list[float] = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=1200)
        if proc.returncode != 0:
            raise RuntimeError(f"producer process failed ({proc.returncode}): {stderr[-2000:]}")
        doc = json.loads(stdout.strip().splitlines()[-1])
        out.append(doc["cpu_s"] * 1000 / doc["runs"])
    return out


def p9_producer_fanout(bench: Bench) -> Measure:
    """8 producers x N runs at once vs 1 producer x N runs: producer CPU per completed run."""
    runs = bench.sizes.p9_runs
    solo = _producers(bench, 1, runs, "p9solo")
    many = _producers(bench, 8, runs, "p9many")
    tether, baseline = Stats.of(many), Stats.of(solo)
    return Measure(
        id="P9",
        name=f"producer CPU per completed run, 8 producers x {runs} runs vs 1 x {runs}",
        unit="ms",
        tether=tether,
        baseline=baseline,
        baseline_name=f"1 producer x {runs} runs alone",
        value=tether.median / baseline.median,
        value_of="median CPU/run of the 8 producers / CPU/run of the lone producer",
        target=Target("<=", 1.2),
        note=(
            f"each producer a process of its own (python -m bench.producer_cpu), submit_many of "
            f"{runs} echo runs over 25 sessions then result() on each; CPU = user + system "
            "time of the producer process (getrusage) from its submit to its last result; the 8 "
            "run at the same time on the same workers"
        ),
        series={"8 producers": many, "1 producer": solo},
    )
