"""Whether the services of the settings answer: one short attempt at Redis and one at the broker,
for a command that must not start half-way (``tether batch`` writes no results file when a
service is down), for the CLI's commands before they use them, and for ``tether status``. A
failure names the service and its setting, within seconds, instead of a client library's
``Error 111 connecting to ...`` after its own retries (a batch with Redis down took 11 s to say
so; an address that drops packets, 20 s and more of silence). An attempt still going after
:data:`NOTICE_AFTER_S` says which service it waits for (``notice``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tether.errors import BrokerUnavailable, StreamUnavailable
from tether.settings import Settings
from tether.settings.checks import mask_url

#: How long one attempt may take (connect, then answer).
CHECK_TIMEOUT_S = 3.0
#: When a check still waits after this long, ``notice`` is told which service it waits for.
NOTICE_AFTER_S = 1.0
Notice = Callable[[str], None]
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
_FIX = "start it (`tether up` starts a local stack; `tether status` shows what is up) or fix"


def check_redis(
    settings: Settings, *, timeout_s: float = CHECK_TIMEOUT_S, notice: Notice | None = None
) -> None:
    """One ``PING`` to the state Redis, no retry.

    Raises:
        StreamUnavailable: it did not answer, naming ``TETHER_REDIS_URL`` (masked).
        ConfigurationError: it refused the credentials.
    """
    url = settings.effective_redis_url
    name = "TETHER_REDIS_URL" if settings.redis_url else "TETHER_BROKER_URL"
    where = f"Redis at {name}={mask_url(url)}"
    with _announced(notice, where, timeout_s):
        problem = _ping(url, timeout_s)
    if problem is not None:
        raise StreamUnavailable(f"{where} did not answer ({problem}); {_FIX} {name}")


def check_broker(
    settings: Settings, *, timeout_s: float = CHECK_TIMEOUT_S, notice: Notice | None = None
) -> None:
    """One connection to the broker when it is not the state Redis (that one is
    :func:`check_redis`'s), no retry.

    Raises:
        BrokerUnavailable: it did not answer, naming ``TETHER_BROKER_URL`` (masked).
    """
    url = settings.effective_broker_url
    if url == settings.effective_redis_url:
        return
    where = f"the broker at TETHER_BROKER_URL={mask_url(url)}"
    with _announced(notice, where, timeout_s):
        redis_broker = url.startswith(_REDIS_SCHEMES)
        problem = _ping(url, timeout_s) if redis_broker else _amqp(url, timeout_s)
    if problem is not None:
        raise BrokerUnavailable(f"{where} did not answer ({problem}); {_FIX} TETHER_BROKER_URL")


def check_services(
    settings: Settings,
    *,
    timeout_s: float = CHECK_TIMEOUT_S,
    notice: Notice | None = None,
    broker: bool = True,
) -> None:
    """:func:`check_redis`, then (``broker``) :func:`check_broker`."""
    check_redis(settings, timeout_s=timeout_s, notice=notice)
    if broker:
        check_broker(settings, timeout_s=timeout_s, notice=notice)


@contextmanager
def _announced(notice: Notice | None, where: str, timeout_s: float) -> Iterator[None]:
    """Tell ``notice`` what the block waits for once it has waited :data:`NOTICE_AFTER_S`."""
    if notice is None:
        yield
        return
    timer = threading.Timer(
        NOTICE_AFTER_S,
        notice,
        [f"waiting for {where} to answer (giving up after {2 * timeout_s:g} s)"],
    )
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


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


__all__ = [
    "CHECK_TIMEOUT_S",
    "NOTICE_AFTER_S",
    "Notice",
    "check_broker",
    "check_redis",
    "check_services",
]
