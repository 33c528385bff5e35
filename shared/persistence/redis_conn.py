"""Redis connections: one factory with sane timeouts, URL redaction, and error translation.

Every place that shows a Redis URL (messages, logs, reprs) goes through :func:`redact_url`, so a
password never leaves this process. Connection failures are translated to
:class:`~tether.errors.StreamUnavailable` (retryable) by :func:`translate_errors`; a rejected
password becomes a :class:`~tether.errors.ConfigurationError` (retrying cannot fix it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from tether.errors import ConfigurationError, StreamUnavailable
from tether.settings_checks import mask_url

SCHEMES = ("redis", "rediss", "unix")
#: Read timeout of every socket. It must exceed the longest ``XREAD BLOCK`` we issue.
DEFAULT_SOCKET_TIMEOUT_S = 10.0
DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_HEALTH_CHECK_INTERVAL_S = 15
#: Margin kept between a ``BLOCK`` and the socket timeout (network and server latency).
BLOCK_MARGIN_MS = 1000
_REDACTED = "***"


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (user name, host, path and db kept); see
    :func:`tether.settings_checks.mask_url`, the one implementation."""
    return mask_url(url)


def redis_from_url(url: str, **kw: Any) -> redis.Redis:
    """A Redis client for ``url`` (``redis://``, ``rediss://`` or ``unix://``).

    Defaults (overridable through ``kw``): ``socket_timeout`` =
    :data:`DEFAULT_SOCKET_TIMEOUT_S`, ``socket_connect_timeout`` =
    :data:`DEFAULT_CONNECT_TIMEOUT_S`, ``health_check_interval`` =
    :data:`DEFAULT_HEALTH_CHECK_INTERVAL_S`, keepalive on, and 3 retries with jittered backoff
    on connection errors. Responses are always bytes (``decode_responses=False``).

    Examples: ``redis://:secret@127.0.0.1:6380/0``, ``rediss://user:secret@host:6379``,
    ``unix:///tmp/redis.sock?db=0&password=secret``.

    Raises:
        ConfigurationError: the scheme is not supported, the URL does not parse, or
            ``decode_responses=True`` was asked for.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        raise ConfigurationError(
            f"Redis URL {redact_url(url)!r} has an unsupported scheme; use redis://host:port/db, "
            "rediss://host:port/db (TLS) or unix:///path/to/redis.sock"
        )
    if kw.get("decode_responses"):
        raise ConfigurationError(
            "decode_responses=True is not supported: Tether stores bytes; drop the option"
        )
    options: dict[str, Any] = {
        "socket_timeout": DEFAULT_SOCKET_TIMEOUT_S,
        "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT_S,
        "health_check_interval": DEFAULT_HEALTH_CHECK_INTERVAL_S,
        "socket_keepalive": True,
        "retry": Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=3),
    }
    if scheme == "unix":
        # Keepalive is a TCP option; unix sockets refuse it.
        del options["socket_keepalive"]
    options.update(kw)
    options["decode_responses"] = False
    try:
        return redis.Redis.from_url(url, **options)
    except ValueError as exc:
        raise ConfigurationError(f"Redis URL {redact_url(url)!r} is malformed: {exc}") from exc


def describe_client(client: redis.Redis) -> str:
    """A password-free URL describing where ``client`` connects (for messages)."""
    kw = client.connection_pool.connection_kwargs
    db = kw.get("db", 0)
    path = kw.get("path")
    if path:
        return f"unix://{quote(str(path))}?db={db}"
    ssl = client.connection_pool.connection_class.__name__.startswith("SSL")
    scheme = "rediss" if ssl else "redis"
    user = kw.get("username")
    auth = f"{user}@" if user else ""
    return f"{scheme}://{auth}{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{db}"


def socket_timeout_s(client: redis.Redis) -> float | None:
    """The read timeout of ``client``'s sockets (None = wait forever)."""
    value = client.connection_pool.connection_kwargs.get("socket_timeout")
    return None if value is None else float(value)


def max_block_ms(client: redis.Redis) -> int | None:
    """The longest ``BLOCK`` that stays safely below the socket timeout (None = no limit)."""
    timeout_s = socket_timeout_s(client)
    if timeout_s is None:
        return None
    return max(1, int(timeout_s * 1000) - BLOCK_MARGIN_MS)


@contextmanager
def translate_errors(where: str) -> Iterator[None]:
    """Map redis-py failures inside the block to Tether errors.

    Args:
        where: a password-free description of the target (see :func:`describe_client`), used in
            messages.

    Raises:
        ConfigurationError: the server rejected our credentials or permissions.
        StreamUnavailable: the server could not be reached, timed out, is loading, or is a
            read-only replica.
    """
    try:
        yield
    except (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError) as exc:
        raise ConfigurationError(
            f"Redis at {where} refused our credentials ({exc}); check the password in the Redis "
            "URL (redis://:PASSWORD@host:port/db)"
        ) from exc
    except redis.exceptions.NoPermissionError as exc:
        raise ConfigurationError(
            f"Redis at {where} denied a command ({exc}); grant the ACL user access to stream, "
            "hash, string and scripting commands"
        ) from exc
    except (
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        redis.exceptions.ReadOnlyError,
    ) as exc:
        raise StreamUnavailable(
            f"Redis at {where} is unavailable ({type(exc).__name__}: {exc}); check that it is "
            "running and reachable; the operation may be retried"
        ) from exc
