"""A TCP forwarder on 127.0.0.1 that a test can cut and restore: the clients' path to a real
server (a private redis-server) goes away as in a network blip, and comes back.

``down()`` closes every forwarded connection and refuses new ones (accepted, then closed);
``up()`` forwards again. The server behind it never notices.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class TcpProxy:
    """``TcpProxy(port)`` forwards ``127.0.0.1:<self.port>`` to ``127.0.0.1:<port>``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._up = True
        self._open: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="tcp-proxy").start()

    def url(self, db: int = 0) -> str:
        """A ``redis://`` URL through the proxy."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    def down(self) -> None:
        """Cut every connection and refuse new ones until :meth:`up`."""
        with self._lock:
            self._up = False
            conns, self._open = self._open, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                conn.close()

    def up(self) -> None:
        """Forward again."""
        with self._lock:
            self._up = True

    def close(self) -> None:
        """Stop listening and cut everything."""
        self._closed = True
        self.down()
        with contextlib.suppress(OSError):
            self._server.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                up = self._up
            if not up:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [], 0.5)
                for side in ready:
                    data = side.recv(65536)
                    if not data:
                        raise OSError("closed")
                    (b if side is a else a).sendall(data)
        except (OSError, ValueError):
            for side in (a, b):
                with contextlib.suppress(OSError):
                    side.close()
