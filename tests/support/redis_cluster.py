"""Pytest fixtures for a private 3-master Redis Cluster (loaded as a plugin by tests/conftest.py).

- ``redis_cluster`` (session): one :class:`~tether.dev.redis_cluster.RedisClusterProcesses`
  with 3 masters on free 127.0.0.1 ports, no replicas, no persistence.
- ``cluster_url`` (function): FLUSHALL on every master, then the ``redis+cluster://`` URL.

Needs redis-server >= 7.0 and redis-cli (see ``redis_binary``); without them the tests fail with
instructions (they are never skipped). Tests that kill nodes must build their own cluster.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tether.dev.redis_cluster import RedisClusterProcesses
from tether.errors import ConfigurationError

__all__ = ["cluster_url", "redis_cluster"]


@pytest.fixture(scope="session")
def redis_cluster(redis_binary: str) -> Iterator[RedisClusterProcesses]:
    """A private 3-master Redis Cluster for the whole test session."""
    try:
        cluster = RedisClusterProcesses(3, binary=redis_binary)
        cluster.start()
    except ConfigurationError as exc:
        pytest.fail(
            f"Redis Cluster tests need redis-server >= 7.0 and redis-cli: {exc}", pytrace=False
        )
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def cluster_url(redis_cluster: RedisClusterProcesses) -> str:
    """The cluster's ``redis+cluster://`` URL, with every master flushed first."""
    for index in range(len(redis_cluster.nodes)):
        client = redis_cluster.node_client(index)
        try:
            client.flushall()
        finally:
            client.close()
    return redis_cluster.url
