"""``tether console``: the command that serves :mod:`tether.producer.ops.console`."""

from __future__ import annotations

import errno
import socket
from typing import Annotated

import typer

from tether.errors import AddressInUse, ConfigurationError
from tether.producer.ops.console import REQUIRED_MODULES, available
from tether.producer.ops.console.config import DEFAULT_PORT


def console(
    host: Annotated[
        str, typer.Option("--host", help="Address to bind (anything but loopback needs --token).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port.")] = DEFAULT_PORT,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="The tenant shown (default: TETHER_TENANT).")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", help="Require this token on every request (header or cookie)."),
    ] = None,
    actions: Annotated[
        bool, typer.Option("--actions", help="Allow cancel, approve, reject, answer and fork.")
    ] = False,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="A host name the console answers to besides loopback and --host (repeatable; "
            "also TETHER_CONSOLE_HOSTS).",
        ),
    ] = None,
) -> None:
    """Serve the web console: sessions, runs, workers, live events, /metrics."""
    if not available():
        raise ConfigurationError(
            f"the console needs {', '.join(REQUIRED_MODULES)}: pip install 'tether[console]'"
        )
    from tether.producer.ops.cli.support import cli_settings
    from tether.producer.ops.console.config import ConsoleConfig
    from tether.producer.ops.console.server import serve

    settings = cli_settings()
    sock = listen(host, port)  # before it says it serves: a taken port is exit 5, not uvicorn's 3
    port = int(sock.getsockname()[1])
    config = ConsoleConfig(
        host=host,
        port=port,
        tenant=tenant or settings.tenant,
        token=token,
        actions=actions,
        allowed_hosts=(*settings.console_hosts, *(allow_host or ())),
    )
    typer.echo(
        f"console on http://{host}:{port}/ (tenant {config.tenant}); Ctrl-C stops it", err=True
    )
    serve(settings, config, sock)


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (0: any free port), as uvicorn binds its own.

    Raises:
        AddressInUse: the port is taken (exit 5), naming it and the fix.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno != errno.EADDRINUSE:
            raise
        raise AddressInUse(
            f"{host}:{port} is in use by another process (another console?); pass --port N, "
            "or --port 0 for any free port"
        ) from None
    sock.set_inheritable(True)
    return sock


def register(app: typer.Typer) -> None:
    """Add ``tether console`` to the CLI."""
    app.command(name="console")(console)
