"""The asyncio Redis client of the producers, with the options of
:func:`~tether.persistence.redis_conn.redis_from_url` (timeouts, keepalive, retries, bytes)."""

from __future__ import annotations

from typing import Any

import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from tether.errors import ConfigurationError
from tether.persistence.redis_conn import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_HEALTH_CHECK_INTERVAL_S,
    DEFAULT_SOCKET_TIMEOUT_S,
    SCHEMES,
    redact_url,
)

AsyncRedis = redis.asyncio.Redis
#: Connections of one producer's pool (each blocking read holds one while it waits).
MAX_CONNECTIONS = 64
#: How long a call waits for a free connection before failing.
POOL_TIMEOUT_S = 20.0


def async_redis_from_url(url: str) -> AsyncRedis:
    """An asyncio Redis client with the options of
    :func:`~tether.persistence.redis_conn.redis_from_url` (timeouts, keepalive, retries, bytes),
    on a pool of at most :data:`MAX_CONNECTIONS` connections.

    Raises:
        ConfigurationError: the scheme is not supported or the URL does not parse.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        raise ConfigurationError(
            f"Redis URL {redact_url(url)!r} has an unsupported scheme; use redis://host:port/db, "
            "rediss://host:port/db (TLS) or unix:///path/to/redis.sock"
        )
    options: dict[str, Any] = {
        "socket_timeout": DEFAULT_SOCKET_TIMEOUT_S,
        "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT_S,
        "health_check_interval": DEFAULT_HEALTH_CHECK_INTERVAL_S,
        "retry": Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=3),
        "decode_responses": False,
    }
    if scheme != "unix":  # keepalive is a TCP option; unix sockets refuse it
        options["socket_keepalive"] = True
    try:
        # a burst of concurrent calls waits for a free connection instead of failing
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            url, max_connections=MAX_CONNECTIONS, timeout=POOL_TIMEOUT_S, **options
        )
        return AsyncRedis.from_pool(pool)
    except ValueError as exc:
        raise ConfigurationError(f"Redis URL {redact_url(url)!r} is malformed: {exc}") from exc
