"""Running the console: uvicorn serving :func:`~tether.producer.ops.console.app.create_app`."""

from __future__ import annotations

import uvicorn

from tether.producer.ops.console.app import create_app
from tether.producer.ops.console.backends import open_backends
from tether.producer.ops.console.config import ConsoleConfig
from tether.settings import Settings

#: Open live feeds are closed this long after a stop is asked (Ctrl-C, SIGTERM).
SHUTDOWN_GRACE_S = 3


def serve(settings: Settings, config: ConsoleConfig) -> None:
    """Serve the console until interrupted (uvicorn handles SIGINT and SIGTERM)."""
    app = create_app(open_backends(settings), config)
    uvicorn.run(
        app,
        host=config.host,
        port=config.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
