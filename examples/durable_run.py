"""A long run survives its worker: SIGKILL mid-run, the run resumes on the other worker.

Starts the embedded default (a private redis-server, a local store, two worker processes), runs
the five-step ``ledger`` agent (examples/durable_agents.py), kills the worker running it after
its second step, and shows that the other worker finished it from its last checkpoint: five
ledger entries, each written once under its call's idempotency key.

Run: .venv/bin/python examples/durable_run.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="tether-durable-"))
    ledger = base / "ledger.txt"
    # the workers import the agent module from this folder
    os.environ.update(
        TETHER_AGENT_MODULES="durable_agents",
        PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
        EXAMPLE_LEDGER=str(ledger),
    )
    from tether.core.events import EventType
    from tether.producer import Producer
    from tether.producer.ops.embedded import EmbeddedStack
    from tether.settings import load_settings

    with EmbeddedStack(load_settings(), base) as stack, Producer(stack.settings) as producer:
        handle = producer.run_async("ledger-1", "post five entries", agent="ledger")
        for event in handle.events():
            if event.type is EventType.STEP_END and event.step == 1:
                break  # two steps are done and checkpointed
        ref = producer.locate(handle.run_id)
        holder = producer.redis.hget(producer.keys.run(*ref), "worker") if ref else None
        label = stack.worker_label(holder.decode() if holder else None)
        victim = next(w for w in stack.workers if w.name == label)
        victim.kill()
        print(f"killed worker {label} after step 2 of run {handle.run_id}")
        started = time.monotonic()
        result = handle.result(timeout=120)
        print(
            f"{result.status}: {result.output!r} after {result.attempts} attempts, "
            f"finished by {stack.worker_label(result.worker)} "
            f"{time.monotonic() - started:.1f} s after the kill"
        )
    lines = ledger.read_text().splitlines()
    print(f"ledger: {len(lines)} entries, {len({line.split()[0] for line in lines})} distinct keys")
    for line in lines:
        print("  " + line)
    sys.exit(0 if result.ok and len(lines) == 5 else 1)


if __name__ == "__main__":
    main()
