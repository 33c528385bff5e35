"""P19: an MCP tool (a warm stdio server) against the same function as a Python tool, side by side.

    python -m bench.mcp_tools            # the issue's sizes: 1,000 runs each (~3 min on 2 cores)
    python -m bench.mcp_tools --quick    # a smoke run (numbers mean little)

Both agents are the same scripted model answering ``add {"a": .., "b": ..}`` with one call of
``add`` and then the tool's output (a 1-step run); one agent's ``add`` is a Python tool, the
other's is the ``add`` of the test MCP server (:mod:`tests.support.mcp_server`, a real
``mcp`` SDK server over stdio). Runs of the two alternate, so both see the same machine.

- **In-process**: 1-step runs on a memory session; the figure is the difference of the medians
  (target: at most 1 ms added), with each side's median and p95, and the same for one tool call
  (``Tool.execute``) alone.
- **On workers**: a private redis-server and moto S3, 2 prefork workers (one pool process each);
  runs submitted and awaited one at a time, alternating; then the server's own count of its
  starts (each stdio connection is one process): target at most 2 for the whole run (one per
  worker process: the pool is reused by every run).

Results: ``bench/results/p19.json`` and ``p19.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.core import percentile
from bench.private_stack import private_redis_and_s3
from bench.report import command_line, host_info, now_iso
from bench.stack import BUCKET, bench_env, bench_settings

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_ADDED_MS = 1.0
TARGET_CONNECTIONS = 2
QUEUE = "p19"


def stats_ms(samples: list[float]) -> dict[str, float]:
    """Median, p95 and mean of ``samples`` (seconds) in milliseconds."""
    ms = [s * 1000 for s in samples]
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 3),
        "p95_ms": round(percentile(ms, 95), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


def alternate(
    a: Callable[[int], None], b: Callable[[int], None], runs: int, warmup: int
) -> tuple[list[float], list[float]]:
    """Time ``a(i)`` and ``b(i)`` alternately, ``runs`` times each after ``warmup`` of each."""
    times_a: list[float] = []
    times_b: list[float] = []
    for i in range(warmup + runs):
        for fn, times in (
            ((a, times_a), (b, times_b)) if i % 2 == 0 else ((b, times_b), (a, times_a))
        ):
            started = time.perf_counter()
            fn(i)
            if i >= warmup:
                times.append(time.perf_counter() - started)
    return times_a, times_b


def sdk_floor(runs: int, warmup: int, records: Path) -> dict[str, float]:
    """The SDK alone: ``Client.call_tool`` of the same server's ``add`` in a loop of its own
    event loop, no Tether in the way (what no client of this server can go below)."""
    import asyncio

    from mcp import Client, StdioServerParameters

    from tests.support.mcp_agents import server_command

    command = server_command()
    params = StdioServerParameters(
        command=command[0], args=command[1:], env={"TETHER_TEST_MCP_DIR": str(records)}
    )

    async def measure() -> list[float]:
        times: list[float] = []
        async with Client(params, cache=None) as client:
            for i in range(warmup + runs):
                started = time.perf_counter()
                await client.call_tool("add", {"a": i, "b": 1})
                if i >= warmup:
                    times.append(time.perf_counter() - started)
        return times

    return stats_ms(asyncio.run(measure()))


def in_process(runs: int, warmup: int, records: Path) -> dict[str, Any]:
    """1-step runs and single calls, Python tool against MCP tool, in this process."""
    from tests.support.mcp_agents import mcp_agent, python_twin, server_command
    from tether.core.items import ToolCall
    from tether.integrations.mcp import McpPool, McpServer, McpToolset
    from tether.runtime.tools import ToolContext
    from tether.settings import Settings

    server = McpServer.stdio("bench", server_command(), env={"TETHER_TEST_MCP_DIR": str(records)})
    pool = McpPool(Settings())
    try:
        toolset = McpToolset(server, pool=pool, include={"add"})  # one tool each, as the twin
        mcp, python = mcp_agent(toolset), python_twin()

        def run_with(agent: Any) -> Callable[[int], None]:
            def one(i: int) -> None:
                result = agent.new_session().run(f'add {{"a": {i}, "b": 1}}')
                if result.output != str(i + 1):
                    raise RuntimeError(f"run {i}: {result.output!r}")

            return one

        run_mcp, run_py = alternate(run_with(mcp), run_with(python), runs, warmup)
        remote = next(t for t in toolset.tools_for("default") if t.name == "add")
        local = python.tools.get("add")
        assert local is not None

        def call_with(tool: Any) -> Callable[[int], None]:
            def one(i: int) -> None:
                call = ToolCall(id=f"c{i}", name="add", arguments=f'{{"a": {i}, "b": 1}}')
                outcome = tool.execute(
                    call, ToolContext("default", "s", "r", 0, call.id, position=0)
                )
                if outcome.output != str(i + 1):
                    raise RuntimeError(f"call {i}: {outcome.output!r}")

            return one

        call_mcp, call_py = alternate(call_with(remote), call_with(local), runs, warmup)
        return {
            "call_sdk_alone": sdk_floor(runs, warmup, records),
            "run_python": stats_ms(run_py),
            "run_mcp": stats_ms(run_mcp),
            "call_python": stats_ms(call_py),
            "call_mcp": stats_ms(call_mcp),
            "connections": pool.opened(),
        }
    finally:
        pool.close()


def on_workers(runs: int, warmup: int, records: Path, log_dir: Path) -> dict[str, Any]:
    """The same runs through 2 prefork workers; the server counts its starts."""
    from tests.support.mcp_agents import servers_env
    from tether.dev.workers import WorkerFleet
    from tether.producer.client import Producer

    with private_redis_and_s3(BUCKET, "p19-") as (redis_url, s3_endpoint):
        env = bench_env(redis_url, s3_endpoint, queue=QUEUE)
        env["TETHER_AGENT_MODULES"] = json.dumps(["tests.support.mcp_agents"])
        env["TETHER_MCP_SERVERS"] = servers_env(records)
        settings = bench_settings(redis_url, s3_endpoint, queue=QUEUE)
        settings = settings.model_copy(update={"agent_modules": ["tests.support.mcp_agents"]})
        with (
            WorkerFleet(env, log_dir, count=2, queue=QUEUE, prefix="p19"),
            Producer(settings) as producer,
        ):

            def run_on(agent: str) -> Callable[[int], None]:
                def one(i: int) -> None:
                    result = producer.run(
                        f"{agent}-{i}", f'add {{"a": {i}, "b": 1}}', agent=agent, wait_s=120
                    )
                    if result.output != str(i + 1):
                        raise RuntimeError(f"{agent} run {i}: {result.status} {result.output!r}")

                return one

            run_mcp, run_py = alternate(run_on("mcp-add"), run_on("py-add"), runs, warmup)
    starts = (records / "starts.log").read_text().splitlines()
    return {
        "run_python": stats_ms(run_py),
        "run_mcp": stats_ms(run_mcp),
        "server_starts": len(starts),
    }


def table(result: dict[str, Any]) -> str:
    """The markdown table of ``result``."""
    head = (
        "| where | what | Python tool median / p95 | MCP tool median / p95 | added at the median |"
    )
    rows = [head, "|---|---|---|---|---|"]
    for where, part in (("in-process", result["in_process"]), ("2 workers", result["workers"])):
        for what in ("run", "call"):
            py, mcp = part.get(f"{what}_python"), part.get(f"{what}_mcp")
            if py is None or mcp is None:
                continue
            added = mcp["median_ms"] - py["median_ms"]
            rows.append(
                f"| {where} | 1-step {what} | {py['median_ms']:.3f} / {py['p95_ms']:.3f} ms "
                f"| {mcp['median_ms']:.3f} / {mcp['p95_ms']:.3f} ms | {added:+.3f} ms |"
            )
    floor = result["in_process"]["call_sdk_alone"]
    tether = result["in_process"]["call_mcp"]["median_ms"] - floor["median_ms"]
    rows.append(
        f"| in-process | the SDK's own call (`Client.call_tool`, no Tether) | - "
        f"| {floor['median_ms']:.3f} / {floor['p95_ms']:.3f} ms "
        f"| Tether's layer: {tether:+.3f} ms |"
    )
    starts = result["workers"]["server_starts"]
    rows.append(f"\nServer starts (connections) over every run on 2 workers: {starts} "
                f"(target <= {TARGET_CONNECTIONS}).")  # fmt: skip
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.mcp_tools", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="50 runs each: a smoke run")
    parser.add_argument("--runs", type=int, default=None, help="runs of each agent (default 1000)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where p19.json and p19.md go")
    args = parser.parse_args(argv)
    runs = args.runs or (50 if args.quick else 1000)
    warmup = 5 if args.quick else 50
    work = Path(tempfile.mkdtemp(prefix="p19-"))
    (work / "in").mkdir()
    (work / "workers").mkdir()
    started = time.monotonic()
    result: dict[str, Any] = {
        "measure": "P19",
        "command": command_line(argv, module="bench.mcp_tools"),
        "when": now_iso(),
        "runs_each": runs,
        "warmup_each": warmup,
        "in_process": in_process(runs, warmup, work / "in"),
        "workers": on_workers(runs, warmup, work / "workers", work),
        "machine": host_info(("mcp", "celery", "redis")),
    }
    result["wall_s"] = round(time.monotonic() - started, 1)
    added = (
        result["in_process"]["run_mcp"]["median_ms"]
        - result["in_process"]["run_python"]["median_ms"]
    )
    result["added_median_ms"] = round(added, 3)
    result["targets"] = {
        "added_median_ms": {"target": f"<= {TARGET_ADDED_MS}", "met": added <= TARGET_ADDED_MS},
        "server_starts": {
            "target": f"<= {TARGET_CONNECTIONS}",
            "met": result["workers"]["server_starts"] <= TARGET_CONNECTIONS,
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = "p19-quick" if args.quick else "p19"
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    title = f"# P19: MCP tool vs Python tool\n\n`{result['command']}`, {result['when']}"
    text = f"{title}\n\n{table(result)}\n"
    (args.out / f"{name}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
