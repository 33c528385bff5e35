"""Whether the services of the settings answer: one short attempt at Redis and one at the broker,
for a command that must not start half-way (``tether batch`` writes no results file when a
service is down) and for ``tether status``. A failure names the setting to fix, instead of a
client library's ``Error 111 connecting to ...`` after its own retries (a batch with Redis down
took 11 s to say so).
"""

from __future__ import annotations

from tether.errors import BrokerUnavailable, StreamUnavailable
from tether.settings import Settings
from tether.settings.checks import mask_url

#: How long one attempt may take (connect and answer).
CHECK_TIMEOUT_S = 3.0
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
_FIX = "start it (`tether up` starts a local stack; `tether status` shows what is up) or fix"


def check_redis(settings: Settings, *, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """One ``PING`` to the state Redis, no retry.

    Raises:
        StreamUnavailable: it did not answer, naming ``TETHER_REDIS_URL`` (masked).
        ConfigurationError: it refused the credentials.
    """
    url = settings.effective_redis_url
    problem = _ping(url, timeout_s)
    if problem is not None:
        name = "TETHER_REDIS_URL" if settings.redis_url else "TETHER_BROKER_URL"
        raise StreamUnavailable(
            f"Redis at {name}={mask_url(url)} did not answer ({problem}); {_FIX} {name}"
        )


def check_broker(settings: Settings, *, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """One connection to the broker when it is not the state Redis (that one is
    :func:`check_redis`'s), no retry.

    Raises:
        BrokerUnavailable: it did not answer, naming ``TETHER_BROKER_URL`` (masked).
    """
    url = settings.effective_broker_url
    if url == settings.effective_redis_url:
        return
    problem = _ping(url, timeout_s) if url.startswith(_REDIS_SCHEMES) else _amqp(url, timeout_s)
    if problem is not None:
        raise BrokerUnavailable(
            f"the broker at TETHER_BROKER_URL={mask_url(url)} did not answer ({problem}); "
            f"{_FIX} TETHER_BROKER_URL"
        )


def check_services(settings: Settings, *, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """:func:`check_redis`, then :func:`check_broker`."""
    check_redis(settings, timeout_s=timeout_s)
    check_broker(settings, timeout_s=timeout_s)


def _ping(url: str, timeout_s: float) -> str | None:
    import redis

    from tether.persistence.redis_conn import describe_client, redis_from_url, translate_errors

    client = redis_from_url(
        url, retry=None, socket_connect_timeout=timeout_s, socket_timeout=timeout_s
    )
    refused = (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError)
    try:
        with translate_errors(describe_client(client)):  # refused credentials: their own error
            try:
                client.ping()
            except refused:
                raise
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                return f"{type(exc).__name__}: {exc}"
    finally:
        client.close()
    return None


def _amqp(url: str, timeout_s: float) -> str | None:
    from kombu.connection import Connection

    try:
        with Connection(url, connect_timeout=timeout_s) as connection:  # type: ignore[no-untyped-call]
            connection.ensure_connection(max_retries=1, timeout=timeout_s)
    except Exception as exc:  # kombu raises its transport's own errors
        return f"{type(exc).__name__}: {exc}"
    return None


__all__ = ["CHECK_TIMEOUT_S", "check_broker", "check_redis", "check_services"]
