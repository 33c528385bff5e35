"""The test stack with the session state on a real 3-master Redis Cluster (the broker stays a
plain redis-server). Test modules import ``cluster_stack`` and ``live_stack`` from here: their
``live_stack`` then overrides the plain one, so ``tests/test_distributed.py``'s own tests,
imported into such a module, run on the cluster unchanged."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.stack import Stack, start_stack
from tether.dev.redis_cluster import RedisClusterProcesses


@pytest.fixture(scope="module")
def cluster_stack(
    redis_cluster: RedisClusterProcesses, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    with start_stack(tmp_path_factory.mktemp("cluster-stack"), redis_cluster.url) as stack:
        yield stack
    logs = "\n".join(worker.log_text() for worker in stack.workers)
    assert "CROSSSLOT" not in logs and "Calling pipelined function" not in logs


@pytest.fixture
def live_stack(cluster_stack: Stack) -> Stack:
    """The cluster-backed stack with every worker running (overrides the plain one)."""
    cluster_stack.ensure_workers()
    return cluster_stack
