"""P18: a parent fans out 100 children on 4 workers, against the same 100 runs submitted
independently and awaited by a client, side by side.

    python -m bench.children              # 5 rounds of each, 100 children, 4 workers
    python -m bench.children --quick      # 2 rounds of 20: a smoke run (numbers mean little)

Both sides run the same agent (``child`` of :mod:`tests.support.child_agents`: a scripted model
answering ``answer: <input>``, a 1-step run) on a private redis-server and moto S3 over HTTP,
with 4 single-process prefork workers; rounds of the two alternate, so both see the same machine.

- **Fan-out**: one ``parent`` run whose tool spawns the 100 children (``ctx.spawn``) and parks on
  them (``ctx.wait``); the last child's end wakes it. *Wake latency*: from the last child's
  commit (the time its worker submitted the parent's wake, right after it recorded the child's
  end, which follows the child's head write) to the first step of the parent's continuation
  (its ``STEP_START`` event): target p50 <= 50 ms.
  *Wall*: from the parent's submit to its continuation's result.
- **Independent**: the same 100 child runs submitted by a client at once (``run_async``) and
  awaited (the client's own handles). *Wall*: from the first submit to the last result.

Target: the fan-out's median wall <= 1.1x the independent median wall.
Results: ``bench/results/p18.json`` and ``p18.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.core import percentile
from bench.private_stack import private_redis_and_s3
from bench.report import command_line, host_info, now_iso
from bench.stack import BUCKET, bench_env, bench_settings

RESULTS = Path(__file__).resolve().parent / "results"
QUEUE = "p18"
AGENTS = "tests.support.child_agents"
TARGET_WAKE_P50_MS = 50.0
TARGET_WALL_RATIO = 1.1


def stats(values: list[float]) -> dict[str, float]:
    """Median, p95 and mean of ``values`` (ms)."""
    return {
        "n": len(values),
        "median_ms": round(statistics.median(values), 1),
        "p95_ms": round(percentile(values, 95), 1),
        "mean_ms": round(statistics.fmean(values), 1),
    }


def _until(check: Any, timeout_s: float = 600.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value is not None:
            return value
        time.sleep(0.005)
    raise TimeoutError("the run did not finish in time")


def fan_out(producer: Any, reader: Any, sid: str, n: int) -> dict[str, float]:
    """One parent fanning out ``n`` children: its wall, and the wake latency."""
    from tether.core.events import EventType
    from tether.core.results import RunStatus
    from tether.runs.waits.base import wake_run_id

    started = time.perf_counter()
    waiting = producer.run(sid, f"fan {n}", agent="parent", wait_s=600)
    if waiting.status is not RunStatus.WAITING:
        raise RuntimeError(f"the parent did not park: {waiting}")
    parked_ms = (time.perf_counter() - started) * 1000
    (pending,) = waiting.pending
    wake = wake_run_id("default", sid, pending.call_id)

    def done() -> Any:
        view = producer.record(wake)
        return view if view is not None and view.result is not None else None

    view = _until(done)
    result = view.result
    wall_ms = (time.perf_counter() - started) * 1000
    if result.status is not RunStatus.COMPLETED:
        raise RuntimeError(f"the parent's continuation: {result}")
    # the last child's worker submitted the wake right after recording that child's end (the
    # family record that held the ends is forgotten once the parent's wait is settled)
    last_end_ms = view.submitted_at_ms
    head = reader.read(sid)
    step_ms = next(
        e.ts_ms for e in head.events if e.run_id == wake and e.type is EventType.STEP_START
    )
    return {
        "wall_ms": wall_ms,
        "wake_ms": float(step_ms - last_end_ms),
        "parked_ms": parked_ms,
        "wake_queue_ms": float(result.queue_ms),
        "last_child_after_park_ms": float(last_end_ms) - (time.time() * 1000 - wall_ms + parked_ms),
    }


def independent(producer: Any, tag: str, n: int) -> float:
    """The same ``n`` child runs submitted at once by a client and awaited: the wall (ms)."""
    started = time.perf_counter()
    handles = [producer.run_async(f"{tag}-{i}", f"topic-{i}", agent="child") for i in range(n)]
    for h in handles:
        result = h.result(timeout=600)
        if not (result.output or "").startswith("answer: "):
            raise RuntimeError(f"independent run: {result}")
    return (time.perf_counter() - started) * 1000


def measure(rounds: int, n: int, workers: int, log_dir: Path) -> dict[str, Any]:
    """Alternate fan-out and independent rounds on one private stack."""

    from tether.dev.workers import WorkerFleet
    from tether.persistence.reader import SessionLogReader
    from tether.persistence.storage_url import open_storage
    from tether.producer.client import Producer

    with private_redis_and_s3(BUCKET, "p18-") as (redis_url, s3_endpoint):
        env = bench_env(redis_url, s3_endpoint, queue=QUEUE)
        env["TETHER_AGENT_MODULES"] = json.dumps([AGENTS])
        settings = bench_settings(redis_url, s3_endpoint, queue=QUEUE)
        settings = settings.model_copy(update={"agent_modules": [AGENTS]})
        store, archive = open_storage(settings.store_url, endpoint_url=s3_endpoint)
        reader = SessionLogReader(store, archive)
        fans: list[dict[str, float]] = []
        alone: list[float] = []
        with (
            WorkerFleet(env, log_dir, count=workers, queue=QUEUE, prefix="p18"),
            Producer(settings) as producer,
        ):
            independent(producer, "warm", min(n, 20))  # imports, connections, the S3 bucket
            fan_out(producer, reader, "warm-parent", min(n, 20))
            for r in range(rounds):
                order = ("fan", "alone") if r % 2 == 0 else ("alone", "fan")
                for side in order:
                    if side == "fan":
                        fans.append(fan_out(producer, reader, f"parent-{r}", n))
                    else:
                        alone.append(independent(producer, f"alone-{r}", n))
    return {
        "fan_out_wall": stats([f["wall_ms"] for f in fans]),
        "independent_wall": stats(alone),
        "wake_after_last_child": stats([f["wake_ms"] for f in fans]),
        "fan_out_parts": {
            k: stats([f[k] for f in fans])
            for k in ("parked_ms", "wake_queue_ms", "last_child_after_park_ms")
        },
    }


def table(result: dict[str, Any]) -> str:
    """The markdown table of ``result``."""
    fan, alone = result["fan_out_wall"], result["independent_wall"]
    wake = result["wake_after_last_child"]
    ratio = result["wall_ratio"]
    return "\n".join(
        [
            "| measure | Tether fan-out (median / p95) | baseline: independent runs "
            "(median / p95) | result | target | |",
            "|---|---|---|---|---|---|",
            f"| P18 wall, {result['children']} children | {fan['median_ms']:.0f} / "
            f"{fan['p95_ms']:.0f} ms | {alone['median_ms']:.0f} / {alone['p95_ms']:.0f} ms "
            f"| {ratio:.2f}x | <= {TARGET_WALL_RATIO}x | {_met(ratio <= TARGET_WALL_RATIO)} |",
            f"| P18 parent's next step after the last child's commit | {wake['median_ms']:.0f}"
            f" / {wake['p95_ms']:.0f} ms | - | {wake['median_ms']:.0f} ms p50 "
            f"| <= {TARGET_WAKE_P50_MS:.0f} ms | "
            f"{_met(wake['median_ms'] <= TARGET_WAKE_P50_MS)} |",
        ]
    )


def render(result: dict[str, Any]) -> str:
    """The page of ``result`` (``bench/results/p18.md``)."""
    parts = result["fan_out_parts"]
    load = result["load_1min_start_end"]
    return (
        f"# P18: child runs, fan-out against independent runs\n\n"
        f"Date: {result['when']} · command: `{result['command']}` · "
        f"{result['rounds']} rounds of each side, alternating, {result['children']} children, "
        f"{result['workers']} single-process workers, on {result['machine'].get('cpu_count', '?')} "
        f"CPUs; load average (1 min) at start / end: {load[0]} / {load[1]}.\n\n"
        f"{table(result)}\n\n"
        f"Where the fan-out's time goes (medians): the parent's submit to its park (its own "
        f"run: spawning and submitting the children, its commit) "
        f"{parts['parked_ms']['median_ms']:.0f} ms; the park to the last child's end "
        f"{parts['last_child_after_park_ms']['median_ms']:.0f} ms (the children ran from "
        f"their submit, during the parent's commit); the wake's time in the queue "
        f"{parts['wake_queue_ms']['median_ms']:.0f} ms; then the parent's continuation runs "
        f"(its restore, a model call, its commit) before its result.\n\n"
        f"{__doc__.split(chr(10) + chr(10), 2)[2]}"
    )


def _met(ok: bool) -> str:
    return "met" if ok else "not met"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.children", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="2 rounds of 20: a smoke run")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of each side (5)")
    parser.add_argument("--children", type=int, default=None, help="children per round (100)")
    parser.add_argument("--workers", type=int, default=4, help="worker processes (4)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where p18.json/.md go")
    parser.add_argument("--render", action="store_true", help="only rewrite p18.md from p18.json")
    args = parser.parse_args(argv)
    if args.render:
        md = render(json.loads((args.out / "p18.json").read_text()))
        (args.out / "p18.md").write_text(md)
        print(md)
        return 0
    rounds = args.rounds or (2 if args.quick else 5)
    n = args.children or (20 if args.quick else 100)
    load_start = os.getloadavg()[0]
    started = time.monotonic()
    result: dict[str, Any] = {
        "measure": "P18",
        "command": command_line(argv, module="bench.children"),
        "when": now_iso(),
        "rounds": rounds,
        "children": n,
        "workers": args.workers,
        **measure(rounds, n, args.workers, Path(tempfile.mkdtemp(prefix="p18-"))),
        "machine": host_info(("celery", "redis")),
    }
    result["load_1min_start_end"] = [round(load_start, 2), round(os.getloadavg()[0], 2)]
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["wall_ratio"] = round(
        result["fan_out_wall"]["median_ms"] / result["independent_wall"]["median_ms"], 3
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "p18.json").write_text(json.dumps(result, indent=2) + "\n")
    md = render(result)
    (args.out / "p18.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
