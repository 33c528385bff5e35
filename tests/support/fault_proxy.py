"""A small fault-injecting HTTP proxy on 127.0.0.1, put in front of the moto S3 server.

Workers are pointed at the proxy instead of moto; the test switches the proxy's mode while runs
are in flight:

- ``pass``: forward every request unchanged (the default).
- ``error``: answer the next ``count`` requests with an S3-style ``500 InternalError`` without
  forwarding them, then pass again (``count=None``: until the mode changes).
- ``lose_reply``: forward the next ``count`` requests, then answer ``500`` anyway: the write
  happened but the client believes it failed (the nastiest case for exactly-once).
- ``delay``: wait ``delay_s`` before forwarding each request.
- ``refuse``: stop listening, so connections are refused as with a stopped endpoint; the port
  is kept and listening resumes when the mode changes.

Every request is counted per mode (``stats``), so a test can prove that its faults were hit.
Requests are forwarded with :mod:`http.client` one by one (keep-alive on both sides).
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import urlsplit

Mode = Literal["pass", "error", "lose_reply", "delay", "refuse"]

_S3_ERROR = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>fault_proxy injected failure</Message></Error>"
)
_HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "expect"}
)


@dataclass
class _Fault:
    mode: Mode = "pass"
    remaining: int | None = None
    delay_s: float = 0.0


class FaultProxy:
    """The proxy: ``FaultProxy(upstream).start()``, then ``.url`` for clients.

    Args:
        upstream: the base URL to forward to, e.g. ``http://127.0.0.1:5000``.
        port: the port to listen on (0: a free one, kept across ``refuse``).
    """

    def __init__(self, upstream: str, port: int = 0) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.upstream_host: str = parts.hostname
        self.upstream_port: int = parts.port
        self._want_port = port
        self.port = 0
        self._lock = threading.Lock()
        self._fault = _Fault()
        self.stats: Counter[str] = Counter()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The proxy's base URL (give it to clients as the S3 endpoint)."""
        return f"http://127.0.0.1:{self.port}"

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Listen and serve in a daemon thread."""
        self._listen()
        return self

    def _listen(self) -> None:
        proxy = self

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request: object, client_address: object) -> None:
                """A client killed mid-request (a SIGKILLed worker) is expected here: quiet."""

        class Handler(_Handler):
            owner = proxy

        server = Server(("127.0.0.1", self.port or self._want_port), Handler)
        self.port = int(server.server_address[1])
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        self._server, self._thread = server, thread

    def _unlisten(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def close(self) -> None:
        """Stop serving."""
        self._unlisten()

    # --- controls -------------------------------------------------------------------------------

    def set_mode(self, mode: Mode, *, count: int | None = None, delay_s: float = 0.0) -> None:
        """Switch the fault mode (see the module docstring)."""
        with self._lock:
            self._fault = _Fault(mode, count, delay_s)
        listening = self._server is not None
        if mode == "refuse" and listening:
            self._unlisten()
        elif mode != "refuse" and not listening:
            self._listen()

    def passthrough(self) -> None:
        """Back to ``pass``."""
        self.set_mode("pass")

    @property
    def mode(self) -> Mode:
        """The current mode (``pass`` once a counted fault is used up)."""
        with self._lock:
            return self._fault.mode

    def _take(self) -> _Fault:
        """The fault for one request (counting down a limited one)."""
        with self._lock:
            fault = self._fault
            applied = _Fault(fault.mode, None, fault.delay_s)
            if fault.remaining is not None:
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._fault = _Fault()
            self.stats[applied.mode] += 1
            return applied


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    owner: FaultProxy
    _upstream: http.client.HTTPConnection | None = None

    def do_GET(self) -> None:
        self._proxy()

    def do_PUT(self) -> None:
        self._proxy()

    def do_POST(self) -> None:
        self._proxy()

    def do_DELETE(self) -> None:
        self._proxy()

    def do_HEAD(self) -> None:
        self._proxy()

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _proxy(self) -> None:
        body = self._read_body()
        fault = self.owner._take()
        if fault.mode == "refuse":  # a connection kept alive from before: drop it unanswered
            self.close_connection = True
            return
        if fault.mode == "error":
            self._answer(500, _S3_ERROR, [("Content-Type", "application/xml")])
            return
        if fault.mode == "delay" and fault.delay_s > 0:
            time.sleep(fault.delay_s)
        try:
            status, headers, data = self._forward(body)
        except (OSError, http.client.HTTPException):
            self.close_connection = True
            self._answer(502, _S3_ERROR, [("Content-Type", "application/xml")])
            return
        if fault.mode == "lose_reply":
            self._answer(500, _S3_ERROR, [("Content-Type", "application/xml")])
            return
        self._answer(status, data, headers)

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
        headers["Content-Length"] = str(len(body))
        for attempt in range(2):  # a kept-alive upstream connection may have been closed
            conn = self._upstream or http.client.HTTPConnection(
                self.owner.upstream_host, self.owner.upstream_port, timeout=60
            )
            self._upstream = conn
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                out = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_HEADERS]
                return response.status, out, data
            except (OSError, http.client.HTTPException):
                conn.close()
                self._upstream = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def _answer(self, status: int, data: bytes, headers: list[tuple[str, str]]) -> None:
        try:
            self.send_response(status)
            sent_length = False
            for name, value in headers:
                if name.lower() == "content-length":
                    sent_length = True
                    value = str(len(data)) if self.command != "HEAD" else value
                self.send_header(name, value)
            if not sent_length:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def finish(self) -> None:
        super().finish()
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None

    def log_message(self, format: str, *args: object) -> None:
        """Silence per-request logging."""
