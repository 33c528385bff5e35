"""One webhook ``POST``: to the addresses that were checked, within one deadline, reading at most
a few KiB of the answer.

httpx gave none of the three. Its timeouts bound each operation, not the whole: a receiver
trickling its answer a byte a second never tripped the read timeout and held a worker's slot
39 s. It resolved the host again after the check, so a DNS answer that changed in between
(rebinding) reached loopback. And ``httpx.post`` read the whole body: a 400 MB answer took a
worker from 49 MB to 851 MB. So the request goes through httpcore (httpx's own HTTP layer) on a
network backend of ours: it connects only to the checked addresses (the URL's host still names
the ``Host`` header, the TLS server name and the certificate checked), every socket operation
waits at most until the deadline, and each read takes at most :data:`READ_CHUNK_BYTES`.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import socket
import ssl
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpcore
import httpx

#: The most one read takes from the socket (h11 would ask for 64 KiB).
READ_CHUNK_BYTES = 4_096
#: The most of a response body read: the status code is what counts, the rest is dropped
#: with the connection.
BODY_LIMIT_BYTES = 4_096
#: What a target keeps as it is when the URL holds characters HTTP cannot send raw.
_TARGET_SAFE = "/?&=%:@!$'()*+,;-._~"


class AttemptTimeout(httpcore.TimeoutException):
    """The attempt's deadline passed."""


def _left(deadline: float) -> float:
    """The seconds until ``deadline``; :class:`AttemptTimeout` when none are left."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise AttemptTimeout("the attempt's deadline passed")
    return left


@contextlib.contextmanager
def _mapped(error: type[httpcore.NetworkError]) -> Iterator[None]:
    """Socket errors as httpcore's: a timeout (the deadline) as :class:`AttemptTimeout`."""
    try:
        yield
    except TimeoutError as exc:
        raise AttemptTimeout("the attempt's deadline passed") from exc
    except OSError as exc:
        raise error(str(exc) or type(exc).__name__) from exc


class DeadlineStream(httpcore.NetworkStream):
    """A connected socket whose every operation ends by ``deadline`` (``time.monotonic()``);
    httpcore's per-operation ``timeout`` is ignored."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with _mapped(httpcore.ReadError):
            self._sock.settimeout(_left(self._deadline))
            return self._sock.recv(min(max_bytes, READ_CHUNK_BYTES))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        view = memoryview(buffer)
        with _mapped(httpcore.WriteError):
            while view:  # each send waits at most until the deadline, however little it takes
                self._sock.settimeout(_left(self._deadline))
                view = view[self._sock.send(view) :]

    def close(self) -> None:
        self._sock.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        try:
            with _mapped(httpcore.ConnectError):
                self._sock.settimeout(_left(self._deadline))  # the handshake's whole time
                tls = ssl_context.wrap_socket(self._sock, server_hostname=server_hostname)
        except BaseException:
            self._sock.close()
            raise
        return DeadlineStream(tls, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object" and isinstance(self._sock, ssl.SSLSocket):
            return self._sock  # what httpcore asks of it (the ALPN protocol) an SSLSocket has
        if info == "socket":
            return self._sock
        if info == "server_addr":
            return self._sock.getpeername()
        return None


class PinnedBackend(httpcore.NetworkBackend):
    """Connects to ``addresses`` (in order, until one answers) whatever host httpcore names,
    before ``deadline``."""

    def __init__(self, addresses: Sequence[str], deadline: float) -> None:
        self._addresses = addresses
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        problems = []
        for address in self._addresses:
            try:
                with _mapped(httpcore.ConnectError):
                    sock = socket.create_connection((address, port), _left(self._deadline))
            except httpcore.ConnectError as exc:
                problems.append(f"{address}: {exc}")
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return DeadlineStream(sock, self._deadline)
        raise httpcore.ConnectError("; ".join(problems) or "no address to connect to")

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("webhooks go over TCP")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@functools.lru_cache(maxsize=4)
def _tls_context(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    """httpx's verifying context (certifi, or SSL_CERT_FILE / SSL_CERT_DIR), built once per
    value of those two (the arguments only key the cache; httpx reads the environment)."""
    return httpx.create_ssl_context()


def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    addresses: Sequence[str],
    deadline: float,
) -> int:
    """POST ``body`` to ``url`` over a connection to one of ``addresses``, all by ``deadline``;
    the status code. A user and password in the URL go as basic authentication.

    Raises:
        httpcore.TimeoutException: the deadline passed (:class:`AttemptTimeout`).
        httpcore.NetworkError | httpcore.ProtocolError: no connection, or no valid answer.
    """
    parts = urlsplit(url)
    host = (parts.hostname or "").encode("idna").decode("ascii")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    sent = [("Host", _host_header(host, parts.port)), *headers.items()]
    if parts.username is not None or parts.password is not None:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        sent.append(("Authorization", "Basic " + base64.b64encode(pair.encode()).decode()))
    request_url = httpcore.URL(
        scheme=parts.scheme.lower(),
        host=host,
        port=parts.port,
        target=quote(target, safe=_TARGET_SAFE),
    )
    tls = _tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    backend = PinnedBackend(addresses, deadline)
    with (
        httpcore.ConnectionPool(ssl_context=tls, network_backend=backend, retries=0) as pool,
        pool.stream("POST", request_url, headers=sent, content=body) as response,
    ):
        read = 0
        for chunk in response.iter_stream():
            read += len(chunk)
            if read >= BODY_LIMIT_BYTES:
                break
        return response.status


def _host_header(host: str, port: int | None) -> str:
    name = f"[{host}]" if ":" in host else host
    return name if port is None else f"{name}:{port}"
