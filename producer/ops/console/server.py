"""Running the console: uvicorn serving :func:`~tether.producer.ops.console.app.create_app`."""

from __future__ import annotations

import socket

import uvicorn

from tether.producer.ops.console.app import create_app
from tether.producer.ops.console.backends import open_backends
from tether.producer.ops.console.config import ConsoleConfig
from tether.settings import Settings

#: Open live feeds are closed this long after a stop is asked (Ctrl-C, SIGTERM).
SHUTDOWN_GRACE_S = 3


def serve(settings: Settings, config: ConsoleConfig, sock: socket.socket | None = None) -> None:
    """Serve the console until interrupted (uvicorn handles SIGINT and SIGTERM), on ``sock``
    when given (a socket the caller bound, so a taken port fails before it says it serves)."""
    app = create_app(open_backends(settings), config)
    options = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    uvicorn.Server(options).run(sockets=None if sock is None else [sock])
