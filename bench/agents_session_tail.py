"""Where P13L's slowest 5% goes: one-loop ``add_items`` of Tether and of SQLite, alternating, each
call split into the time inside the worker thread (on CPU, and waiting: the sync) and the rest
(the hand-over to the thread and back to the loop), with the garbage collector's time in it and,
for the slowest 5%, which append of each ``ARCHIVE_BATCH_EVENTS`` it was.

    python -m bench.agents_session_tail                  # 800 appends each, session of 100 items
    python -m bench.agents_session_tail --items 10000

prints one JSON document. Only timing wrappers are added: around the function each session hands
to its thread (Tether's ``call_in_thread``, SQLite's ``asyncio.to_thread``) and a ``gc`` callback.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.agents_session import _item, _sessions, settled_sqlite


class Probe:
    """The timings of the call in flight (one at a time: the loop runs one call)."""

    def __init__(self) -> None:
        self.in_thread_ms = 0.0
        self.thread_cpu_ms = 0.0
        self.gc_ms = 0.0
        self._gc_started = 0.0

    def on_gc(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc_ms += (time.perf_counter() - self._gc_started) * 1000

    def timed(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` recording its wall and CPU time in the thread that runs it."""

        def run(*args: Any, **kwargs: Any) -> Any:
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.in_thread_ms = (time.perf_counter() - started) * 1000
                self.thread_cpu_ms = (time.thread_time() - cpu) * 1000

        return run


def _install(probe: Probe) -> None:
    import agents.memory.sqlite_session as sqlite_module

    import tether.integrations.openai_agents.session as tether_module

    call_in_thread = tether_module.call_in_thread
    to_thread = asyncio.to_thread

    async def tether_hop(function: Callable[..., Any], *args: Any, settle: bool = False) -> Any:
        return await call_in_thread(probe.timed(function), *args, settle=settle)

    async def sqlite_hop(function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return await to_thread(probe.timed(function), *args, **kwargs)

    tether_module.call_in_thread = tether_hop  # type: ignore[assignment]
    sqlite_module.asyncio.to_thread = sqlite_hop  # type: ignore[assignment]
    gc.callbacks.append(probe.on_gc)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def _summary(rows: list[dict[str, float]], batch: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("wall_ms", "in_thread_ms", "handover_ms", "thread_cpu_ms", "thread_wait_ms"):
        values = [r[name] for r in rows]
        out[name] = {"p50": round(_pct(values, 50), 3), "p95": round(_pct(values, 95), 3)}
    p95 = _pct([r["wall_ms"] for r in rows], 95)
    slow = [r for r in rows if r["wall_ms"] >= p95]
    positions: dict[int, int] = {}
    for r in slow:
        positions[int(r["n"]) % batch] = positions.get(int(r["n"]) % batch, 0) + 1
    out["slowest"] = {
        "calls": len(slow),
        "with_gc": sum(1 for r in slow if r["gc_ms"] > 0),
        f"by_position_in_{batch}": dict(sorted(positions.items(), key=lambda kv: -kv[1])[:5]),
    }
    return out


def measure(items: int, appends: int) -> dict[str, Any]:
    """``appends`` one-loop appends on each side, alternating; the split of each."""
    from tether.persistence.saving import ARCHIVE_BATCH_EVENTS

    probe = Probe()
    _install(probe)
    rows: dict[str, list[dict[str, float]]] = {"tether": [], "sqlite": []}
    with (
        tempfile.TemporaryDirectory(prefix="tether-p13-tail-") as root,
        settled_sqlite(Path(root) / "sqlite.db"),
    ):
        tether, sqlite = _sessions(Path(root), "tail", items)
        loop = asyncio.new_event_loop()
        counter = iter(range(10**9))
        try:
            for n in range(appends + 2):
                pair = [("tether", tether), ("sqlite", sqlite)]
                for name, session in pair if n % 2 == 0 else pair[::-1]:
                    gc_before = probe.gc_ms
                    started = time.perf_counter()
                    loop.run_until_complete(session.add_items([_item(next(counter))]))
                    wall = (time.perf_counter() - started) * 1000
                    if n >= 2:
                        rows[name].append(
                            {
                                "n": n,
                                "wall_ms": wall,
                                "in_thread_ms": probe.in_thread_ms,
                                "handover_ms": wall - probe.in_thread_ms,
                                "thread_cpu_ms": probe.thread_cpu_ms,
                                "thread_wait_ms": probe.in_thread_ms - probe.thread_cpu_ms,
                                "gc_ms": probe.gc_ms - gc_before,
                            }
                        )
        finally:
            loop.close()
    return {name: _summary(r, ARCHIVE_BATCH_EVENTS) for name, r in rows.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.agents_session_tail", description=__doc__
    )
    parser.add_argument("--items", type=int, default=100, help="items in each session")
    parser.add_argument("--appends", type=int, default=800, help="appends on each side")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    load = round(os.getloadavg()[0], 2)
    result = measure(args.items, args.appends)
    doc = {"items": args.items, "appends": args.appends, "load_1m_start": load, **result}
    doc["load_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
