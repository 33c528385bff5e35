"""``tether schedule add | list | pause | resume | remove | migrate`` and ``tether beat``:
scheduled runs (see :mod:`tether.producer.schedules`). A schedule is its tenant's
(``--tenant``, default ``TETHER_TENANT``); ``tether beat`` needs celery-redbeat (the
``schedules`` extra), editing schedules does not."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from tether.producer.ops.cli.support import JsonOption, TenantOption, cli_settings, warn_line

if TYPE_CHECKING:
    from tether.producer.schedules import Schedules, ScheduleView

schedule_app = typer.Typer(
    help="Run an agent on a session on a schedule (cron or every N seconds).",
    no_args_is_help=True,
)
NameArg = Annotated[
    str, typer.Argument(metavar="NAME", help="Schedule name ([A-Za-z0-9_-.], up to 64).")
]


def register(app: typer.Typer) -> None:
    """Add ``tether schedule`` and ``tether beat`` to ``app``."""
    app.add_typer(schedule_app, name="schedule")
    app.command()(beat)


def _require_redbeat() -> None:
    try:
        import redbeat  # noqa: F401
    except ImportError:
        from tether.errors import ConfigurationError

        raise ConfigurationError(
            "scheduled runs need celery-redbeat: pip install 'tether[schedules]'"
        ) from None


def _schedules() -> Schedules:
    from tether.producer.schedules import Schedules

    return Schedules(cli_settings())


def _warn_without_beat(schedules: Schedules) -> None:
    """Say so when no beat is alive to fire the schedule (a tenant's credential cannot read
    the beats' presence: then nothing is said)."""
    from tether.errors import PermissionDenied

    try:
        alive = schedules.beats()
    except PermissionDenied:
        return
    if not alive:
        warn_line(
            "no beat is running, so this schedule does not fire yet: start one with "
            "`tether beat` (`tether up` starts one with the local stack)"
        )


def _show(view: ScheduleView, as_json: bool) -> None:
    from tether.producer.ops.render import emit_json

    if as_json:
        emit_json(view.as_dict())
        return
    state = "paused" if view.paused else f"next tick {_when(view.as_dict()['next_tick'])}"
    typer.echo(f"schedule {view.name} ({view.schedule.timing}): {state}")


def _when(value: object) -> str:
    return "-" if value is None else str(value)


@schedule_app.command()
def add(
    name: NameArg,
    session_id: Annotated[str, typer.Option("--session", "-s", help="The session each run is on.")],
    agent: Annotated[str, typer.Option("--agent", "-a", help="The agent each run uses.")],
    cron: Annotated[
        str | None,
        typer.Option("--cron", help="Five-field cron expression (UTC), e.g. '0 7 * * *'."),
    ] = None,
    every_s: Annotated[
        int | None, typer.Option("--every-s", help="Or: a run every N seconds.")
    ] = None,
    input: Annotated[str | None, typer.Option("--input", "-i", help="Each run's input.")] = None,
    tenant: TenantOption = None,
    missed: Annotated[
        str,
        typer.Option(
            "--missed", help="Ticks missed while no beat ran: catch_up (one run) or skip (none)."
        ),
    ] = "catch_up",
    as_json: JsonOption = False,
) -> None:
    """Add a schedule (checked first: a bad cron, unknown agent or taken name writes nothing).

    Warns when no beat is running to fire it.
    """
    schedules = _schedules()
    view = schedules.add(
        name,
        session_id=session_id,
        agent=agent,
        input=input,
        cron=cron,
        every_s=every_s,
        tenant=tenant,
        missed=missed,  # type: ignore[arg-type]  # checked by the Schedule model
    )
    _show(view, as_json)
    _warn_without_beat(schedules)


@schedule_app.command("list")
def list_schedules(tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """List the tenant's schedules with their last and next ticks and the last tick's run."""
    from rich.table import Table

    from tether.producer.ops.render import emit_json, make_console

    views = _schedules().list(tenant=tenant)
    if as_json:
        emit_json([view.as_dict() for view in views])
        return
    table = Table(
        "name", "when", "session", "agent", "tenant", "state", "last tick", "next tick", "last run"
    )
    for view in views:
        row = view.as_dict()
        table.add_row(
            view.name,
            view.schedule.timing,
            row["session_id"],
            row["agent"],
            row["tenant"],
            "paused" if view.paused else "active",
            _when(row["last_tick"]),
            _when(row["next_tick"]),
            _when(row["last_run_id"]),
        )
    make_console().print(table)


@schedule_app.command()
def pause(name: NameArg, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """Stop firing a schedule until it is resumed."""
    _show(_schedules().pause(name, tenant=tenant), as_json)


@schedule_app.command()
def resume(name: NameArg, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """Fire a paused schedule again (ticks missed meanwhile follow its --missed policy)."""
    _show(_schedules().resume(name, tenant=tenant), as_json)


@schedule_app.command()
def remove(name: NameArg, tenant: TenantOption = None) -> None:
    """Remove a schedule (runs it submitted go on)."""
    _schedules().remove(name, tenant=tenant)
    typer.echo(f"schedule {name} removed")


@schedule_app.command(hidden=True)
def show(name: NameArg, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """Show one schedule."""
    _show(_schedules().get(name, tenant=tenant), as_json)


@schedule_app.command()
def migrate() -> None:
    """Move schedules stored before tenants owned them into their tenants' keyspaces (once,
    after upgrading, with the operator's credential); prints each move to check."""
    from tether.producer.schedules.migrate import migrate_legacy

    moves = migrate_legacy(_schedules().store)
    for move in moves:
        typer.echo(f"{move.outcome}: {move.name} (tenant {move.tenant or '-'}) {move.detail}")
    moved = sum(1 for m in moves if m.outcome == "moved")
    typer.echo(f"{moved} of {len(moves)} schedule(s) moved into their tenants' keyspaces")


def beat(
    loglevel: Annotated[str, typer.Option("--loglevel", "-l", help="Log level.")] = "INFO",
    max_interval_s: Annotated[
        int | None,
        typer.Option("--max-interval-s", min=1, help="Longest sleep of the beat loop (s)."),
    ] = None,
    print_command: Annotated[
        bool, typer.Option("--print-command", help="Print the celery command; do not run it.")
    ] = False,
) -> None:
    """Run Celery beat for the schedules (any number of them: one ticks, the others wait)."""
    _require_redbeat()
    from tether.producer.schedules.beat import beat_config

    settings = cli_settings()
    beat_config(settings)  # a cluster URL fails here, naming the variable
    argv = [sys.executable, "-m", "celery", "-A", "tether.producer.schedules.beat", "beat"]
    argv += ["--loglevel", loglevel]
    if max_interval_s is not None:
        argv += ["--max-interval", str(max_interval_s)]
    if print_command:
        typer.echo(" ".join(argv))
        return
    env = dict(os.environ)
    env["TETHER_STORE_URL"] = settings.store_url
    os.execve(sys.executable, argv, env)
