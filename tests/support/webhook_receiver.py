"""A local HTTP receiver of webhooks for tests: a server thread that answers each request as a
script says (fail with 500, hang past the sender's timeout, accept) and records what it got."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: What the receiver does with one request.
FAIL, HANG, ACCEPT = "fail", "hang", "accept"


@dataclass(frozen=True)
class Received:
    """One request as received, and what the receiver answered."""

    path: str
    headers: dict[str, str]
    body: bytes
    action: str


class Receiver:
    """Answers per path: the next action of that path's script, then ``default[path]`` (accept
    when none)."""

    def __init__(self, hang_s: float) -> None:
        self.hang_s = hang_s
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
        """What ``path`` received so far."""
        with self._lock:
            return [r for r in self.received if r.path == path]


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            action = receiver.next_action(self.path)
            receiver.record(Received(self.path, dict(self.headers.items()), body, action))
            if action == HANG:
                time.sleep(receiver.hang_s)  # the sender gave up meanwhile
            code = 200 if action in (ACCEPT, HANG) else 500
            try:
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()
            except OSError:  # the sender closed the connection (its timeout)
                pass

        def log_message(self, format: str, *args: object) -> None:
            return None

    return Handler


@contextmanager
def webhook_receiver(hang_s: float = 3.0) -> Iterator[Receiver]:
    """A running receiver on a free port of 127.0.0.1 (``receiver.url``), stopped afterwards."""
    receiver = Receiver(hang_s)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
