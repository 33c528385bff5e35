"""One fleet for the parked-run suites on real workers: timers, signals and child runs.

``test_waits_workers.py``, ``test_signals_workers.py`` and ``test_children_workers.py`` each
started two workers of their own with near-identical settings. They share this one instead
(session-scoped, beside the shared stack): two workers, so two sweepers, loading the agents of
all three, with the settings of all three (they do not conflict: an hour's longest wait, child
runs two deep, marks reconciled every second, the crash probe armed for the sessions it names).
``tests/support/schedule.py`` sends the three files to one pytest process, so the fleet starts
once per run of ``make test``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.stack import Stack
from tether.core.results import RunStatus
from tether.core.waits import ChildRef
from tether.dev.workers import WorkerFleet
from tether.producer import Producer

#: The queue the fleet consumes (and submits wakes and child runs to).
QUEUE = "agentsq"
AGENT_MODULES = ",".join(
    f"tests.support.{name}"
    for name in ("wait_agents", "signal_agents", "child_agents", "crash_agents")
)


@dataclass
class AgentsFleet:
    """The running fleet, its environment, and where the crash probe leaves its marks."""

    fleet: WorkerFleet
    env: dict[str, str]
    crash_dir: Path

    def producer(self, stack: Stack, **settings: object) -> Producer:
        """A producer on the fleet's queue, with the workers restarted if a test stopped one."""
        for worker in self.fleet.workers:
            if not worker.alive():
                worker.start()
        return Producer(stack.settings.model_copy(update={"queue": QUEUE, **settings}))


@pytest.fixture(scope="session")
def agents_fleet(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentsFleet]:
    """Two workers serving the timer, signal, parent/child and crash-probe agents."""
    crash_dir = tmp_path_factory.mktemp("agents-crashes")
    env = dict(
        stack.env,
        TETHER_AGENT_MODULES=AGENT_MODULES,
        CRASH_TEST_DIR=str(crash_dir),
        TETHER_QUEUE=QUEUE,
        TETHER_MAX_WAIT_S="3600",
        TETHER_MAX_CHILD_DEPTH="2",
        TETHER_WAIT_RECONCILE_S="1",
    )
    fleet = WorkerFleet(env, tmp_path_factory.mktemp("agents"), count=2, queue=QUEUE, prefix="ag")
    fleet.start()
    try:
        yield AgentsFleet(fleet, env, crash_dir)
    finally:
        fleet.stop()


def parked_run(producer: Producer, sid: str, text: str) -> tuple[str, tuple[ChildRef, ...], str]:
    """The parent's parked call, its children, and the parent's run id."""
    waiting = producer.run(sid, text, agent="parent", wait_s=90)
    assert waiting.status is RunStatus.WAITING, waiting
    (pending,) = waiting.pending
    assert pending.wait_for is not None and pending.wait_for.kind == "children"
    return pending.call_id, pending.wait_for.children, waiting.run_id
