"""A long run survives its worker: SIGKILL mid-run, the run resumes on the other worker.

Starts the embedded default (a private redis-server, a local store, two worker processes), runs
the five-step ``ledger`` agent (examples/durable_agents.py), kills the worker running it after
its second step, and shows that the other worker finished it from its last checkpoint: five
ledger entries, each written once under its call's idempotency key.

It always uses its own private services, in a temporary folder that it removes at the end (kept,
and named, if the example fails, for the worker logs): a ``tether up`` stack's ``.tether/env`` or a
``.env`` in the current folder is not read. ``TETHER_*`` service settings in the environment
(``TETHER_BROKER_URL``, ``TETHER_REDIS_URL``, ``TETHER_STORE_URL``) are refused with a message:
another worker on those services could take the run, and the example could not kill it.

Run: .venv/bin/python examples/durable_run.py
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


#: Settings that would point the example at services other workers may consume.
SERVICE_SETTINGS = ("TETHER_BROKER_URL", "TETHER_REDIS_URL", "TETHER_STORE_URL")


def main() -> None:
    named = [name for name in SERVICE_SETTINGS if os.environ.get(name)]
    if named:
        sys.exit(
            f"durable_run.py starts its own services; unset {', '.join(named)} first "
            "(a worker of yours on them could take the run, and the example kills only its own)"
        )
    base = Path(tempfile.mkdtemp(prefix="tether-durable-"))
    ok = False
    try:
        # settings files are read from the working directory: a `tether up` stack's .tether/env
        # (or a .env) there must not point the example at other services
        os.chdir(base)
        ok = run(base)
    finally:
        os.chdir(HERE)
        if ok:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"kept {base} (worker logs) for a look", file=sys.stderr)
    sys.exit(0 if ok else 1)


def run(base: Path) -> bool:
    """Run the scenario in ``base``; True when the run completed with five ledger entries."""
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
    from tether.runs.queue.record import RunField
    from tether.settings import load_settings

    with EmbeddedStack(load_settings(), base) as stack, Producer(stack.settings) as producer:
        handle = producer.run_async("ledger-1", "post five entries", agent="ledger")
        for event in handle.events():
            if event.type is EventType.STEP_END and event.step == 1:
                break  # two steps are done and checkpointed
        ref = producer.locate(handle.run_id)
        holder = producer.redis.hget(producer.keys.run(*ref), RunField.WORKER) if ref else None
        label = stack.worker_label(holder.decode() if isinstance(holder, bytes) else holder)
        victim = next((w for w in stack.workers if w.name == label), None)
        if victim is None:
            print(
                f"run {handle.run_id} is not held by one of the example's workers "
                f"(holder {label}; run: {handle.result(timeout=30).status})",
                file=sys.stderr,
            )
            return False
        victim.kill()
        print(f"killed worker {label} after step 2 of run {handle.run_id}")
        started = time.monotonic()
        result = handle.result(timeout=120)
        print(
            f"{result.status}: {result.output!r} after {result.attempts} attempts, "
            f"finished by {stack.worker_label(result.worker)} "
            f"{time.monotonic() - started:.1f} s after the kill"
        )
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    print(f"ledger: {len(lines)} entries, {len({line.split()[0] for line in lines})} distinct keys")
    for line in lines:
        print("  " + line)
    return result.ok and len(lines) == 5


if __name__ == "__main__":
    main()
