"""The asyncio Redis client of the producers: the twin of
:func:`~tether.persistence.redis_conn.redis_from_url`, with the same options (one builder,
:func:`~tether.persistence.redis_conn.client_options`: timeouts, keepalive, retries, bytes) on a
bounded pool. A single Redis only: the asyncio producer does not speak Redis Cluster."""

from __future__ import annotations

from typing import Any

import redis.asyncio
from redis.asyncio.retry import Retry

from tether.errors import ConfigurationError
from tether.persistence.redis_conn import client_options, default_backoff, redact_url

AsyncRedis = redis.asyncio.Redis
#: Connections of one producer's pool (each blocking read holds one while it waits).
MAX_CONNECTIONS = 64
#: How long a call waits for a free connection before failing.
POOL_TIMEOUT_S = 20.0
#: What :func:`async_redis_from_url` suggests for a URL of another scheme.
SCHEMES_HINT = "redis://host:port/db, rediss://host:port/db (TLS) or unix:///path/to/redis.sock"


def async_redis_from_url(url: str, **kw: Any) -> AsyncRedis:
    """An asyncio Redis client for ``url``, with the defaults below.

    The defaults of :func:`~tether.persistence.redis_conn.redis_from_url` (overridable through
    ``kw``), on a pool of at most :data:`MAX_CONNECTIONS` connections.

    Raises:
        ConfigurationError: the scheme is not supported, the URL does not parse, or
            ``decode_responses=True`` was asked for.
    """
    retry = Retry(default_backoff(), retries=3)
    options = client_options(url, kw, retry=retry, schemes=SCHEMES_HINT)
    try:
        # a burst of concurrent calls waits for a free connection instead of failing
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            url, **{"max_connections": MAX_CONNECTIONS, "timeout": POOL_TIMEOUT_S, **options}
        )
        return AsyncRedis.from_pool(pool)
    except ValueError as exc:
        raise ConfigurationError(f"Redis URL {redact_url(url)!r} is malformed: {exc}") from exc
