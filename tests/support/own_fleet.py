"""A test module's own worker fleet on the shared stack: its own queue and agent modules."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.support.stack import Stack
from tether.dev.workers import WorkerFleet
from tether.producer import Producer


@contextlib.contextmanager
def own_fleet(
    stack: Stack, log_dir: Path, *, queue: str, agent_modules: str, **env: str
) -> Iterator[Producer]:
    """One worker on ``queue`` loading ``agent_modules`` (plus ``env``), and a producer for it."""
    full_env = dict(stack.env, TETHER_AGENT_MODULES=agent_modules, TETHER_QUEUE=queue, **env)
    producer = Producer(stack.settings.model_copy(update={"queue": queue}))
    fleet = WorkerFleet(full_env, log_dir, count=1, queue=queue, prefix=queue)
    fleet.start()
    try:
        yield producer
    finally:
        fleet.stop()
        producer.close()
