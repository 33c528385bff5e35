"""``tether demo``: a short scenario on the embedded default (or on the configured services).

The scenario runs the built-in agents on real worker processes and checks what it shows:

1. ``notes``: one session over several turns, each turn served by whichever worker took it
   (both workers serve turns), then ``recall`` returns every fact in order; a live tail thread
   prints the session's events as they happen and must see every committed event.
2. ``calculator``: tool calls on another session.
3. ``run_async``: a batch of handles over three sessions, awaited with ``asyncio``;
   each session keeps its submission order.
4. ``sessions verify`` on every session of the demo (gapless log, fold equals stored memory).

Each check prints PASS or FAIL; the command exits 1 when any check failed.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tether.persistence.reader import SessionLogReader
from tether.persistence.storage_url import open_storage
from tether.producer.client import Producer
from tether.producer.ops.demo_scenario import Check, Scenario
from tether.producer.ops.embedded import EmbeddedStack, Interrupted, SignalGuard
from tether.producer.ops.render import pass_fail
from tether.settings import load_settings


def summary(console: Console, checks: list[Check], elapsed_s: float) -> int:
    """Print the table of checks; return the exit code (0 only when all passed)."""
    table = Table("check", "result", title="tether demo")
    for check in checks:
        table.add_row(check.name, pass_fail(check.ok))
    console.print(table)
    failed = [c for c in checks if not c.ok]
    if failed or not checks:
        console.print(f"[bold red]demo FAILED[/]: {len(failed)} of {len(checks)} checks failed")
        return 1
    console.print(f"[bold green]demo PASSED[/]: {len(checks)} checks in {elapsed_s:.1f} s")
    return 0


def run_demo(base_dir: Path, console: Console, *, worker_count: int = 2) -> int:
    """Start what is needed, play the scenario, tear everything down; return the exit code."""
    started = time.monotonic()
    settings = load_settings()
    with SignalGuard() as guard:
        stack = EmbeddedStack(settings, base_dir, worker_count=worker_count, guard=guard)
        console.print("[bold]tether demo[/]: starting " + _plan(stack))
        try:
            with stack:
                for name, where in stack.describe().items():
                    console.print(f"  {name:<6} " + escape(where))
                if stack.workers:
                    ready = ", ".join(f"{w.name} (pid {w.pid})" for w in stack.workers)
                    console.print(f"workers ready: {ready}")
                else:
                    console.print("workers: using the workers already running (--no-workers)")
                checks = _play(stack, console, guard)
                guard.check()  # a signal whose exception was lost still stops the demo
                console.print("stopping workers and services...")
        except Interrupted as exc:
            console.print(f"[yellow]{exc}[/]: workers and services stopped")
            raise
    return summary(console, checks, time.monotonic() - started)


def _plan(stack: EmbeddedStack) -> str:
    parts = ["a private redis-server" if stack.embedded_redis else "the configured Redis"]
    parts.append("the local store" if stack.embedded_store else "the configured store")
    if stack.worker_count:
        parts.append(f"{stack.worker_count} worker processes")
    return ", ".join(parts)


def _play(stack: EmbeddedStack, console: Console, guard: SignalGuard) -> list[Check]:
    settings = stack.settings
    store, archive = open_storage(
        settings.store_url,
        endpoint_url=settings.s3_endpoint_url,
        region_name=settings.s3_region,
        sse=settings.s3_sse,
        sse_kms_key_id=settings.s3_kms_key_id,
    )
    producer = Producer(settings)
    try:
        scenario = Scenario(
            producer,
            SessionLogReader(store, archive),
            console,
            stack.worker_label,
            expect_workers=len(stack.workers),
            checkpoint=guard.check,
        )
        scenario.play()
        return scenario.checks
    finally:
        producer.close()
