"""The ``tether`` command line: ``tether --help`` lists the commands.

This module only wires commands together and turns errors into one clear line and an exit code
(see :mod:`tether.producer.ops.cli.support` for the codes); the commands live in small modules:
:mod:`tether.producer.ops.cli.runs` (run, submit, wait, cancel, tail),
:mod:`tether.producer.ops.cli.sessions`
(``tether sessions ...``), :mod:`tether.producer.ops.demo` (``tether demo``),
:mod:`tether.producer.ops.cli.stack` (``tether up | down | status``),
:mod:`tether.producer.ops.cli.schedule` (``tether schedule ...``, ``tether beat``),
:mod:`tether.producer.ops.cli.webhooks` (``tether webhooks dead | redeliver``), and, when
installed,
``tether.producer.ops.cli.batch`` (``tether batch``). Settings are validated once, by
:func:`~tether.producer.ops.cli.support.cli_settings`, before a command touches any service.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated

import click
import typer

from tether.producer.ops.cli import (
    approvals,
    batch,
    replay,
    runs,
    schedule,
    sessions,
    signals,
    stack,
    tenants,
    webhooks,
)
from tether.producer.ops.cli import autoscale as autoscale_cli
from tether.producer.ops.cli import console as console_cli
from tether.producer.ops.cli import mcp as mcp_cli
from tether.producer.ops.cli.support import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    STATE,
    cli_settings,
    ctrl_c_stops,
    error_line,
    exit_code_for,
)

# Building the command tree (all `tether --help` does) must stay cheap: the command modules keep
# Celery, redis-py, boto3, pydantic models, the settings and rich out of their top-level imports
# and import them inside the commands (tests/test_cli_startup.py checks it).

try:  # typer bundles its own click from 0.2x on
    from typer._click.exceptions import ClickException as TyperClickException
except ImportError:  # pragma: no cover - older typer uses click itself
    TyperClickException = click.ClickException  # type: ignore[misc,assignment]

app = typer.Typer(
    name="tether",
    help="Tether: long-lived AI-agent sessions on Celery.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
)


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        typer.echo(f"tether {version('tether')}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    _version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version; exit."
        ),
    ] = False,
) -> None:
    """Tether: long-lived AI-agent sessions on Celery."""
    STATE.debug = debug


@app.command()
def config(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the effective settings (TETHER_* variables and .env), secrets masked."""
    from tether.producer.ops.render import emit_json, make_console, settings_table
    from tether.settings import Settings, masked

    values = masked(cli_settings())
    if as_json:
        emit_json(values)
        return
    descriptions = {
        "TETHER_" + name.upper(): field.description or ""
        for name, field in Settings.model_fields.items()
    }
    make_console().print(settings_table(values, descriptions))


@app.command()
def demo(
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the local store and worker logs go.")
    ] = Path(".tether"),
    no_workers: Annotated[
        bool, typer.Option("--no-workers", help="Use workers already running; start none.")
    ] = False,
    workers: Annotated[int, typer.Option(min=1, max=8, help="Worker processes to start.")] = 2,
) -> None:
    """Run the demo scenario on the embedded default (or on the configured Redis and store)."""
    from tether.producer.ops.demo import run_demo
    from tether.producer.ops.embedded import Interrupted
    from tether.producer.ops.render import make_console

    try:
        code = run_demo(directory, make_console(), worker_count=0 if no_workers else workers)
    except Interrupted as exc:
        code = 128 + exc.signum  # 130 for Ctrl-C, 143 for SIGTERM
    raise typer.Exit(code)


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def worker(
    ctx: typer.Context,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-c", help="Pool processes or threads.")
    ] = None,
    pool: Annotated[
        str, typer.Option("--pool", "-P", help="prefork, threads or solo.")
    ] = "prefork",
    queues: Annotated[
        str | None, typer.Option("--queues", "-Q", help="Queues to consume (TETHER_QUEUE).")
    ] = None,
    loglevel: Annotated[str, typer.Option("--loglevel", "-l", help="Log level.")] = "INFO",
    hostname: Annotated[
        str | None,
        typer.Option("--hostname", "-n", help="Node name, e.g. w1@%h (default: tether-<pid>@%h)."),
    ] = None,
    print_command: Annotated[
        bool, typer.Option("--print-command", help="Print the celery command; do not run it.")
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", min=1, max=65535, help="Serve Prometheus /metrics here."),
    ] = None,
) -> None:
    """Run a Celery worker with Tether's app; extra arguments go to `celery worker`."""
    settings = cli_settings()
    settings.effective_redis_url  # noqa: B018 - fail now, naming the variable, not in celery
    argv = [sys.executable, "-m", "celery", "-A", "tether.worker.app", "worker", "--pool", pool]
    argv += ["--queues", queues or settings.queue, "--loglevel", loglevel]
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    # Celery's default, celery@<host>, is the same for every worker of a machine: two
    # `tether worker` in one folder were two nodes of one name (the pid stays: exec below)
    argv += ["--hostname", hostname or f"tether-{os.getpid()}@%h"]
    argv += ["--without-mingle", "--without-gossip", *ctx.args]
    if print_command:
        typer.echo(" ".join(argv))
        return
    env = dict(os.environ)
    env["TETHER_STORE_URL"] = settings.store_url  # a relative file:// store, made absolute
    from tether.observability.worker_metrics import worker_metrics_env

    env.update(worker_metrics_env(settings, metrics_port))
    os.execve(sys.executable, argv, env)


runs.register(app)
approvals.register(app)
signals.register(app)
replay.register(app)
sessions.register(app)
batch.register(app)
console_cli.register(app)
stack.register(app)
autoscale_cli.register(app)
schedule.register(app)
webhooks.register(app)
tenants.register(app)
mcp_cli.register(app)


def run_cli(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code, turning errors into one line on stderr."""
    command = typer.main.get_command(app)
    STATE.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # every command: Ctrl-C must stop a `tether run` or `tether batch` that a CI runner or a
        # test harness started with SIGINT ignored (inherited SIG_IGN), or it runs on silently
        with ctrl_c_stops():
            result = command.main(args=argv, prog_name="tether", standalone_mode=False)
    except click.exceptions.Abort as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, KeyboardInterrupt):
            return 128 + int(getattr(cause, "signum", EXIT_INTERRUPTED - 128))
        typer.echo("aborted", err=True)
        return EXIT_FAILED
    except (click.ClickException, TyperClickException) as exc:
        # typer >= 0.2x raises its own bundled click's exceptions: both are usage errors
        exc.show()
        return int(getattr(exc, "exit_code", EXIT_USAGE))
    except KeyboardInterrupt as exc:
        return 128 + int(getattr(exc, "signum", EXIT_INTERRUPTED - 128))
    except Exception as exc:
        if STATE.debug:
            traceback.print_exc()
        typer.echo(error_line(exc), err=True)
        return exit_code_for(exc)
    return result if isinstance(result, int) else EXIT_OK


def main() -> None:
    """Console-script entry point (``tether``)."""
    code = run_cli()
    if code > 128:  # interrupted: Ctrl-C gives the prompt back now
        _exit_now(code)
    sys.exit(code)


def _exit_now(code: int) -> None:
    """Flush the output, run the atexit handlers, and leave without tearing the interpreter
    down: freeing every object of every imported module does nothing for a process that is
    exiting, and takes 1-3 s of a loaded machine after the command itself has stopped."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing left to flush
            stream.flush()
    atexit._run_exitfuncs()
    os._exit(code)
