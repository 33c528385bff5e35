"""Redis connections: one factory with sane timeouts, URL redaction, and error translation.

One Redis (``redis://``, ``rediss://``, ``unix://``) or a Redis Cluster
(``redis+cluster://host:port[,host:port...]``, ``rediss+cluster://`` with TLS).

Every place that shows a Redis URL (messages, logs, reprs) goes through :func:`redact_url`, so a
password never leaves this process. Connection failures are translated to
:class:`~tether.errors.StreamUnavailable` (retryable) by :func:`translate_errors`; a rejected
password becomes a :class:`~tether.errors.ConfigurationError` (retrying cannot fix it); keys of
one script in different cluster slots become a plain :class:`~tether.errors.TetherError` (a bug).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast
from urllib.parse import quote, urlsplit

import redis
import redis.asyncio
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import parse_url
from redis.retry import Retry

from tether.errors import ConfigurationError, PermissionDenied, StreamUnavailable, TetherError
from tether.settings.checks import mask_url

#: Cluster schemes and the single-node scheme whose URL options they share.
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
SCHEMES = ("redis", "rediss", "unix", *CLUSTER_SCHEMES)
#: Any client kind (the asyncio one included), for the functions below that look inside one.
RedisClient = redis.Redis | RedisCluster | redis.asyncio.Redis
#: Read timeout of every socket. It must exceed the longest ``XREAD BLOCK`` we issue.
DEFAULT_SOCKET_TIMEOUT_S = 10.0
DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_HEALTH_CHECK_INTERVAL_S = 15
#: Margin kept between a ``BLOCK`` and the socket timeout (network and server latency).
BLOCK_MARGIN_MS = 1000
_REDACTED = "***"


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (user name, host, path and db kept); see
    :func:`tether.settings.checks.mask_url`, the one implementation."""
    return mask_url(url)


def default_backoff() -> ExponentialWithJitterBackoff:
    """The backoff between retries of a command that lost its connection (both clients)."""
    return ExponentialWithJitterBackoff(base=0.05, cap=1.0)


def _default_retry() -> Retry:
    return Retry(default_backoff(), retries=3)


def client_options(url: str, kw: dict[str, Any], *, retry: Any, schemes: str) -> dict[str, Any]:
    """The options of a single-node client for ``url`` (no I/O; both client factories use it):
    the defaults, ``kw`` over them, and bytes responses.

    Args:
        url: the Redis URL (its scheme is checked against :data:`SCHEMES`).
        kw: the caller's options.
        retry: the retry policy (each client kind has its own ``Retry`` class).
        schemes: the URLs to suggest when the scheme is not supported.

    Raises:
        ConfigurationError: the scheme is not supported, or ``decode_responses=True`` was asked
            for.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        raise ConfigurationError(
            f"Redis URL {redact_url(url)!r} has an unsupported scheme; use {schemes}"
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
        "retry": retry,
    }
    if scheme == "unix":
        # Keepalive is a TCP option; unix sockets refuse it.
        del options["socket_keepalive"]
    options.update(kw)
    options["decode_responses"] = False
    return options


#: What :func:`redis_from_url` suggests for a URL of another scheme.
SCHEMES_HINT = (
    "redis://host:port/db, rediss://host:port/db (TLS), unix:///path/to/redis.sock, or for a "
    "Redis Cluster redis+cluster://host:port[,host:port...] (rediss+cluster:// with TLS)"
)


def redis_from_url(url: str, **kw: Any) -> redis.Redis:
    """A Redis client for ``url``, with the defaults below.

    ``url``: ``redis://``, ``rediss://``, ``unix://``, or a cluster: ``redis+cluster://``,
    ``rediss+cluster://``.

    Defaults (overridable through ``kw``): ``socket_timeout`` =
    :data:`DEFAULT_SOCKET_TIMEOUT_S`, ``socket_connect_timeout`` =
    :data:`DEFAULT_CONNECT_TIMEOUT_S`, ``health_check_interval`` =
    :data:`DEFAULT_HEALTH_CHECK_INTERVAL_S`, keepalive on, and 3 retries with jittered backoff
    on connection errors. Responses are always bytes (``decode_responses=False``).

    Examples: ``redis://:secret@127.0.0.1:6380/0``, ``rediss://user:secret@host:6379``,
    ``unix:///tmp/redis.sock?db=0&password=secret``,
    ``redis+cluster://:secret@10.0.0.1:7000,10.0.0.2:7000`` (any reachable node of the list
    suffices; the client learns the others from the cluster).

    A cluster client is a :class:`redis.cluster.RedisCluster`, returned typed as
    :class:`redis.Redis` (see :func:`_cluster_from_url`). Unlike a single-node client it connects
    at once, to learn which node serves which slot.

    Raises:
        ConfigurationError: the scheme is not supported, the URL does not parse,
            ``decode_responses=True`` was asked for, or a cluster refused our credentials.
        StreamUnavailable: no node of a cluster URL could be reached.
    """
    options = client_options(url, kw, retry=_default_retry(), schemes=SCHEMES_HINT)
    scheme = url.split("://", 1)[0].lower()
    if scheme in CLUSTER_SCHEMES:
        return _cluster_from_url(url, CLUSTER_SCHEMES[scheme], kw)
    try:
        return redis.Redis.from_url(url, **options)
    except ValueError as exc:
        raise ConfigurationError(f"Redis URL {redact_url(url)!r} is malformed: {exc}") from exc


def _cluster_nodes(hosts: str, shown: str) -> list[ClusterNode]:
    nodes = []
    for item in hosts.split(","):
        try:
            parts = urlsplit("//" + item)
            host, port = parts.hostname, parts.port
        except ValueError as exc:
            raise ConfigurationError(
                f"Redis Cluster URL {shown!r} has a bad node {item!r} ({exc}); "
                "use redis+cluster://host:port[,host:port...]"
            ) from exc
        if not host or parts.username is not None or parts.path:
            raise ConfigurationError(
                f"Redis Cluster URL {shown!r} has a bad node {item!r}; "
                "use redis+cluster://[:password@]host:port[,host:port...]"
            )
        nodes.append(ClusterNode(host, port or 6379))  # type: ignore[no-untyped-call]
    return nodes


def _cluster_from_url(url: str, base_scheme: str, kw: dict[str, Any]) -> redis.Redis:
    """A :class:`RedisCluster` for ``<base_scheme>+cluster://[auth@]h:p[,h:p...][/0][?opts]``.

    The user, password and query options are parsed by redis-py exactly as for a single-node
    URL of ``base_scheme`` (the URL rebuilt on the first node), so both kinds accept the same
    options. The client is returned typed as :class:`redis.Redis`: Tether's stores annotate
    that type, and RedisCluster offers the subset they use (keyed commands, scripts whose keys
    share one slot, non-transactional pipelines).
    """
    shown = redact_url(url)
    rest = url.split("://", 1)[1]
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    auth, at, hosts = netloc.rpartition("@")
    nodes = _cluster_nodes(hosts, shown)
    first = f"{base_scheme}://{auth}{at}{hosts.split(',')[0]}{tail}"
    try:
        url_options: dict[str, Any] = parse_url(first)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise ConfigurationError(f"Redis URL {shown!r} is malformed: {exc}") from exc
    for name in ("host", "port"):
        url_options.pop(name, None)
    # rediss:// parses to an SSL connection class; the cluster's node clients take ssl=True.
    if url_options.pop("connection_class", None) is not None:
        url_options["ssl"] = True
    options: dict[str, Any] = {
        "socket_timeout": DEFAULT_SOCKET_TIMEOUT_S,
        "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT_S,
        "socket_keepalive": True,
        **url_options,
        **kw,
    }
    if options.pop("db", 0) != 0:
        raise ConfigurationError(
            f"Redis Cluster URL {shown!r} names a database other than 0; a cluster has only "
            "database 0: drop the /db part"
        )
    # The cluster client takes its retry policy apart from the connection options, and has no
    # health checks (it drops health_check_interval silently; we drop it openly).
    retry = options.pop("retry", _default_retry())
    options.pop("health_check_interval", None)
    options["decode_responses"] = False
    with translate_errors(shown):
        client = RedisCluster(startup_nodes=nodes, retry=retry, **options)
    # The caller sees redis.Redis (see the docstring): the command subset Tether uses is shared.
    return cast(redis.Redis, client)


def _connection_kwargs(client: RedisClient) -> dict[str, Any]:
    if isinstance(client, RedisCluster):
        return client.nodes_manager.connection_kwargs
    return client.connection_pool.connection_kwargs


def _describe_cluster(client: RedisCluster) -> str:
    kw = _connection_kwargs(client)
    user = kw.get("username")
    auth = f"{user}@" if user else ""
    nodes = ",".join(f"{n.host}:{n.port}" for n in client.startup_nodes or [])
    return f"{'rediss' if kw.get('ssl') else 'redis'}+cluster://{auth}{nodes}"


def describe_client(client: RedisClient) -> str:
    """A password-free URL describing where ``client`` connects (for messages); for a cluster
    client, ``redis+cluster://`` and the nodes it was given."""
    if isinstance(client, RedisCluster):
        return _describe_cluster(client)
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


def socket_timeout_s(client: RedisClient) -> float | None:
    """The read timeout of ``client``'s sockets (None = wait forever)."""
    value = _connection_kwargs(client).get("socket_timeout")
    return None if value is None else float(value)


def max_block_ms(client: RedisClient) -> int | None:
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
            read-only replica; or the cluster is down, resharding or has uncovered slots.
        TetherError: a cluster refused keys of one script or transaction that are in different
            hash slots (a bug in Tether).
    """
    try:
        yield
    except _CREDENTIAL_ERRORS as exc:
        raise _credentials_refused(where, exc) from exc
    except redis.exceptions.NoPermissionError as exc:
        raise PermissionDenied(
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
            "running and reachable (`tether up` starts a local one, and `tether config` shows "
            "the URL in use); the operation may be retried"
        ) from exc
    except (
        redis.exceptions.ResponseError,
        redis.exceptions.ClusterError,
        redis.exceptions.RedisClusterException,
    ) as exc:
        mapped = _cluster_error(exc, where)
        if mapped is None:
            raise
        raise mapped from exc


_CREDENTIAL_ERRORS = (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError)


def _credentials_refused(where: str, exc: Exception) -> ConfigurationError:
    return ConfigurationError(
        f"Redis at {where} refused our credentials ({exc}); check the password in the Redis "
        "URL (redis://:PASSWORD@host:port/db)"
    )


#: Error texts of keys in different slots: the server's CROSSSLOT, redis-py's own check of a
#: script's keys, and a script touching an undeclared key of another slot.
_CROSS_SLOT_HINTS = ("CROSSSLOT", "same slot", "same key slot", "non local key")


def _cluster_error(exc: Exception, where: str) -> TetherError | None:
    """The Tether error for a cluster failure, or None for an unrelated ``ResponseError``."""
    text = str(exc)
    if isinstance(
        exc,
        (redis.exceptions.ClusterCrossSlotError, redis.exceptions.CrossSlotTransactionError),
    ) or any(hint in text for hint in _CROSS_SLOT_HINTS):
        return TetherError(
            f"Redis Cluster at {where} refused a command whose keys are in different hash slots "
            f"({type(exc).__name__}: {exc}); the keys of one Tether script or transaction must "
            "share a slot, so this is a bug in Tether: please report it with this message"
        )
    if isinstance(exc, redis.exceptions.MovedError):
        return ConfigurationError(
            f"Redis at {where} is a cluster node (it answered MOVED {exc}); connect with "
            "redis+cluster://host:port[,host:port...] instead"
        )
    # The cluster client wraps what stopped it from learning the slot map.
    if isinstance(exc.__cause__, _CREDENTIAL_ERRORS):
        return _credentials_refused(where, exc.__cause__)
    if "Cluster mode is not enabled" in text:
        return ConfigurationError(
            f"Redis at {where} is not a cluster ({exc}); connect to a single Redis with "
            "redis://host:port/db instead"
        )
    if isinstance(
        exc,
        (
            redis.exceptions.ClusterError,
            redis.exceptions.TryAgainError,
            redis.exceptions.RedisClusterException,
        ),
    ):
        return StreamUnavailable(
            f"Redis Cluster at {where} is unavailable ({type(exc).__name__}: {exc}); check that "
            "every node is running and all 16384 slots are served; the operation may be retried"
        )
    return None
