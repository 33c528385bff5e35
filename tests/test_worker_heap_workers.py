"""A prefork pool child keeps its long-lived heap out of the collector's reach (P1's tail).

A full collection scans every tracked object; in a pool child that was the whole inherited heap
plus what the first run loaded (botocore's S3 model), 100-300 ms beside other load, inside the
run it hit: the slowest 1% of P1's runs. The worker freezes the heap before the pool forks, in
each child, and once after a child's first task, so a full collection scans only what the runs
left since. On a real prefork worker (one pool child), an agent reports its process's state.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support.own_fleet import own_fleet
from tests.support.stack import Stack, unique
from tether.producer import Producer

QUEUE = "heapq"
#: A run's own garbage and the few objects a worker adds per run stay far below this; the
#: unfrozen heap of a child was ~150,000 objects before the freeze.
MAX_TRACKED = 20_000


@pytest.fixture(scope="module")
def heap_worker(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Producer]:
    with own_fleet(
        stack,
        tmp_path_factory.mktemp("heap"),
        queue=QUEUE,
        agent_modules="tests.support.heap_agents",
    ) as producer:
        yield producer


def test_a_pool_childs_heap_is_frozen_after_its_first_run(heap_worker: Producer) -> None:
    states = []
    for i in range(4):
        result = heap_worker.run(unique(f"heap-{i % 2}"), "how big?", agent="heap", timeout_s=60)
        assert result.status == "COMPLETED", result
        states.append(json.loads(result.output or "{}"))
    assert len({s["pid"] for s in states}) == 1  # one pool child ran them all
    assert states[0]["frozen"] > 50_000  # the inherited heap, frozen before the first run
    for later in states[1:]:  # and what the first run loaded, frozen after it
        assert later["frozen"] > states[0]["frozen"]
        assert later["tracked"] < MAX_TRACKED, states
