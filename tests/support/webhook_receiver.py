"""A local HTTP receiver of webhooks for tests: a server thread that answers each request as a
script says and records what it got.

Besides failing (500), hanging a while then accepting, and accepting, it can hold a sender the
ways a hostile receiver would: trickle its answer a byte at a time, send a body of hundreds of
MB, or never answer at all. Each such request records how long the sender stayed
(``Received.ended``, ``held_s``) and how many bytes the receiver got to send (``sent_bytes``).
Plain HTTP, or TLS with a certificate the test made (``tls=``).
"""

from __future__ import annotations

import datetime
import select
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

#: What the receiver does with one request.
FAIL, HANG, ACCEPT = "fail", "hang", "accept"
#: Send the status line and headers a byte every ``trickle_interval_s`` (for ``trickle_s``).
TRICKLE = "trickle"
#: Answer 200 with a body of ``huge_bytes``, sent as fast as the sender reads it.
HUGE = "huge"
#: Read the request, then say nothing until the sender hangs up (at most ``silent_s``).
SILENT = "silent"

_CHUNK = b"\0" * (1 << 20)


@dataclass(eq=False)
class Received:
    """One request as received, and what the receiver answered."""

    path: str
    headers: dict[str, str]
    body: bytes
    action: str
    query: str = ""
    #: The TLS server name the sender asked for (None: plain HTTP, or no SNI).
    server_name: str | None = None
    #: Set when the receiver is done with the request (answered, or the sender went away).
    ended: threading.Event = field(default_factory=threading.Event)
    #: How long the sender stayed, from the request read to the end (s).
    held_s: float | None = None
    #: How many bytes of its answer the receiver got to send.
    sent_bytes: int = 0


class Receiver:
    """Answers per path: the next action of that path's script, then ``default[path]`` (accept
    when none)."""

    def __init__(self, hang_s: float) -> None:
        self.hang_s = hang_s
        self.trickle_interval_s = 0.5
        self.trickle_s = 60.0
        self.huge_bytes = 400 << 20
        self.silent_s = 120.0
        self.scripts: dict[str, list[str]] = {}
        self.default: dict[str, str] = {}
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self.url = ""

    def next_action(self, path: str) -> str:
        with self._lock:
            script = self.scripts.get(path)
            if script:
                return script.pop(0)
            return self.default.get(path, ACCEPT)

    def record(self, item: Received) -> None:
        with self._lock:
            self.received.append(item)

    def on(self, path: str) -> list[Received]:
        """What ``path`` (without its query) received so far."""
        with self._lock:
            return [r for r in self.received if r.path == path]


def _trickle(handler: BaseHTTPRequestHandler, receiver: Receiver, item: Received) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Slow: "
    count = int(receiver.trickle_s / receiver.trickle_interval_s)
    for byte in (head + b"a" * max(0, count - len(head)) + b"\r\n\r\n")[:count]:
        handler.wfile.write(bytes([byte]))
        item.sent_bytes += 1
        time.sleep(receiver.trickle_interval_s)


def _huge(handler: BaseHTTPRequestHandler, receiver: Receiver, item: Received) -> None:
    handler.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % receiver.huge_bytes)
    while item.sent_bytes < receiver.huge_bytes:
        chunk = _CHUNK[: receiver.huge_bytes - item.sent_bytes]
        handler.wfile.write(chunk)
        item.sent_bytes += len(chunk)


def _silent(handler: BaseHTTPRequestHandler, receiver: Receiver) -> None:
    deadline = time.monotonic() + receiver.silent_s
    while time.monotonic() < deadline:
        readable, _, _ = select.select([handler.connection], [], [], 0.1)
        if readable and not handler.connection.recv(1):
            return  # the sender hung up


def _answer(handler: BaseHTTPRequestHandler, receiver: Receiver, item: Received) -> None:
    if item.action == TRICKLE:
        _trickle(handler, receiver, item)
    elif item.action == HUGE:
        _huge(handler, receiver, item)
    elif item.action == SILENT:
        _silent(handler, receiver)
    else:
        if item.action == HANG:
            time.sleep(receiver.hang_s)  # the sender gave up meanwhile
        handler.send_response(200 if item.action in (ACCEPT, HANG) else 500)
        handler.send_header("Content-Length", "0")
        handler.end_headers()


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path, _, query = self.path.partition("?")
            name = getattr(self.connection, "tether_server_name", None)
            item = Received(
                path, dict(self.headers.items()), body, receiver.next_action(path), query, name
            )
            receiver.record(item)
            started = time.monotonic()
            try:
                _answer(self, receiver, item)
            except OSError:  # the sender closed the connection (its deadline)
                pass
            finally:
                item.held_s = time.monotonic() - started
                item.ended.set()

        def log_message(self, format: str, *args: object) -> None:
            return None

    return Handler


def _serve_tls(server: ThreadingHTTPServer, context: ssl.SSLContext) -> None:
    """Wrap each accepted connection in TLS, noting the server name the sender asked for."""

    def on_name(sock: ssl.SSLObject | ssl.SSLSocket, name: str | None, _: object) -> None:
        sock.tether_server_name = name  # type: ignore[union-attr]

    context.sni_callback = on_name  # type: ignore[assignment]
    server.socket = context.wrap_socket(server.socket, server_side=True)


@contextmanager
def webhook_receiver(hang_s: float = 3.0, tls: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    """A running receiver on a free port of 127.0.0.1 (``receiver.url``), stopped afterwards;
    ``tls``: a server context (its certificate names the host the test's URLs use)."""
    receiver = Receiver(hang_s)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    server.daemon_threads = True
    scheme = "http"
    if tls is not None:
        _serve_tls(server, tls)
        scheme = "https"
    receiver.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def tls_for(host: str, directory: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context whose certificate names ``host``, from a throwaway CA, and the CA's
    file (for ``SSL_CERT_FILE``)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook test CA")])
    ca = (
        _valid(x509.CertificateBuilder(), now)
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _valid(x509.CertificateBuilder(), now)
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert_file, key_file = (directory / n for n in ("ca.pem", "cert.pem", "key.pem"))
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context, ca_file


def _valid(builder: x509.CertificateBuilder, now: datetime.datetime) -> x509.CertificateBuilder:
    return (
        builder.serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
