"""``tether up | down | status``: the local stack of the project folder, and what runs on it.

See :mod:`tether.producer.ops.local_stack` for what ``up`` starts and where it keeps its files.
``status`` also works without a local stack: it then shows the workers and the queue of the
configured Redis.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tether.errors import TetherError
from tether.producer.ops.cli.support import (
    EXIT_UNAVAILABLE,
    JsonOption,
    cli_settings,
    warn_line,
)

# `tether --help` imports this module to read the commands' options: the local stack (psutil,
# the settings), redis-py, the worker presence models and rich are imported by the functions
# that use them.
if TYPE_CHECKING:
    from rich.console import Console

    from tether.producer.ops.local_stack import StackState, UpOptions, UpResult
    from tether.producer.schedules.presence import BeatPresence
    from tether.runs.presence import WorkerPresence
    from tether.settings import Settings

_STACK_VARIABLES = ("TETHER_BROKER_URL", "TETHER_REDIS_URL", "TETHER_STORE_URL")


def register(app: typer.Typer) -> None:
    """Add ``up``, ``down`` and ``status`` to ``app``."""
    app.command()(up)
    app.command()(down)
    app.command()(status)


def _rel(path: str | Path, project: Path) -> str:
    try:
        return str(Path(path).relative_to(project))
    except ValueError:
        return str(path)


# `tether up`'s surface, one alias per option so the command itself reads as its steps.
WorkersOption = Annotated[int, typer.Option("--workers", min=1, max=16, help="Worker processes.")]
ConcurrencyOption = Annotated[
    int, typer.Option("--concurrency", "-c", min=1, max=32, help="Pool size per worker.")
]
S3Option = Annotated[
    bool, typer.Option("--s3", help="A moto S3 server as the store (default: .tether/store).")
]
NoConsoleOption = Annotated[
    bool, typer.Option("--no-console", help="Do not start `tether console`.")
]
NoBeatOption = Annotated[
    bool, typer.Option("--no-beat", help="Do not start `tether beat` (schedules do not fire).")
]
ConsolePortOption = Annotated[
    int | None, typer.Option("--console-port", min=1, max=65535, help="Console port.")
]
ConsoleActionsOption = Annotated[
    bool,
    typer.Option(
        "--console-actions",
        help="Start the console with its actions on (cancel, approve, reject, answer, fork).",
    ),
]
AutoscaleOption = Annotated[
    str | None,
    typer.Option(
        "--autoscale",
        metavar="MIN:MAX",
        help="Run `tether autoscale` with MIN..MAX workers instead of --workers.",
    ),
]


def up(
    workers: WorkersOption = 1,
    concurrency: ConcurrencyOption = 1,
    s3: S3Option = False,
    no_console: NoConsoleOption = False,
    no_beat: NoBeatOption = False,
    console_port: ConsolePortOption = None,
    console_actions: ConsoleActionsOption = False,
    autoscale: AutoscaleOption = None,
) -> None:
    """Start a local stack in this folder (Redis, store, workers, beat, console), detached.

    Every later `tether` command in this folder uses it (settings in .tether/env); `tether down`
    stops it. When it is already up, says so and exits 0.
    """
    from rich.markup import escape

    from tether.producer.ops.cli.autoscale import parse_bounds
    from tether.producer.ops.local_stack import LocalStack, UpOptions
    from tether.producer.ops.render import make_console

    project = Path.cwd()
    console = make_console()
    stack = LocalStack(project, cli_settings())
    options = UpOptions(
        workers=workers,
        concurrency=concurrency,
        s3=s3,
        console=not no_console,
        beat=not no_beat,
        console_port=console_port,
        console_actions=console_actions,
        autoscale=parse_bounds(autoscale) if autoscale is not None else None,
    )
    result = stack.up(options, progress=lambda step: console.print(f"[dim]{escape(step)}...[/]"))
    if result.already_up:
        _print_already_up(console, result.state, project, options_given=options != UpOptions())
    else:
        _print_started(console, result, project, stack.paths.env_file, options)
        _warn_overrides(project)


def _print_already_up(
    console: Console, state: StackState, project: Path, *, options_given: bool
) -> None:
    from rich.markup import escape

    console.print(f"the local stack of {escape(str(project))} is already up:")
    _print_services(console, state, project)
    console.print("stop it with `tether down`")
    if options_given:
        # `tether up --workers 3` on a running stack said "already up" and kept its workers
        warn_line(
            "the options given to this `tether up` were not applied to the stack already "
            "running: `tether down`, then `tether up` with them"
        )


def _print_started(
    console: Console, result: UpResult, project: Path, env_file: Path, options: UpOptions
) -> None:
    """The services started, and how other shells and commands find them."""
    from rich.markup import escape

    from tether.producer.ops.local_stack import beat_available, console_available

    console.print(f"[bold green]local stack up[/] in {escape(str(project))}")
    _print_services(console, result.state, project)
    if options.console and not console_available():
        console.print(r"[dim]console: not installed (pip install 'tether\[console]')[/]")
    if options.beat and not beat_available():
        console.print(
            r"[dim]beat: not installed, schedules do not fire (pip install 'tether\[schedules]')[/]"
        )
    console.print(
        f"settings: {escape(str(env_file))}; every `tether` command run in this folder uses them"
    )
    console.print(f"other shells: [bold]source {escape(str(env_file))}[/] (passwords masked here):")
    for key, value in result.exports:
        console.print(f"  export {key}={escape(value)}", soft_wrap=True)


def _warn_overrides(project: Path) -> None:
    """Name the settings that would hide the stack from commands run here."""
    import os

    from dotenv import dotenv_values

    dotenv = dotenv_values(project / ".env") if (project / ".env").is_file() else {}
    for name in _STACK_VARIABLES:
        where = "the environment" if name in os.environ else ".env" if name in dotenv else None
        if where is not None:
            warn_line(
                f"{name} is set in {where} and wins over .tether/env: commands in this shell "
                f"will not use the local stack; unset it (`unset {name}`) to use the stack"
            )


def down() -> None:
    """Stop the local stack of this folder (only the processes `tether up` started)."""
    from tether.producer.ops.local_stack import LocalStack, read_state

    project = Path.cwd()
    stack = LocalStack(project, _settings_or_defaults())
    if read_state(stack.paths) is None:
        typer.echo(f"no local stack is up in {project}")
        stack.down()  # a leftover .tether/env would point commands at nothing
        return
    stopped = stack.down()
    names = ", ".join(f"{r.name} (pid {r.pid})" for r in stopped) or "nothing was running"
    typer.echo(f"local stack down in {project}: stopped {names}")
    for note in stack.notes:
        warn_line(note)


def _settings_or_defaults() -> Settings:
    # `down` must work even when a setting is broken: it reads nothing but .tether/
    from tether.settings import Settings

    try:
        return cli_settings()
    except TetherError:
        return Settings.model_construct()


@dataclass
class Status:
    """What ``tether status`` shows."""

    project: str
    redis: str
    services: list[dict[str, Any]] = field(default_factory=list)
    console_url: str | None = None
    workers: list[WorkerPresence] = field(default_factory=list)
    beats: list[BeatPresence] = field(default_factory=list)
    """The live beats, the one firing the schedules first (none: schedules do not fire)."""
    queue_depth: dict[str, int] = field(default_factory=dict)
    running: list[str] = field(default_factory=list)
    waiting: list[dict[str, str]] = field(default_factory=list)
    """Runs waiting now, and for what: a running run (``"model budget"``), a call parked on the
    fleet (``"timer due ..."``, ``"signal deployed"``, ``"children 1/3 (all)"``; with its
    ``call_id`` and ``kind``)."""
    active_sessions: int = 0
    parked: dict[str, Any] = field(default_factory=dict)
    """Tool calls parked on the fleet that it wakes at a time: ``timed`` and ``next_due``."""
    fleet: dict[str, Any] = field(default_factory=dict)
    """The autoscaling signals (:class:`tether.runs.fleet.FleetSignals`)."""
    error: str | None = None
    broker_error: str | None = None
    """Why a broker other than the state Redis did not answer (None: it did, or is that Redis)."""

    @property
    def healthy(self) -> bool:
        """No recorded service is down, and Redis and the broker answered."""
        up = all(s["up"] for s in self.services)
        return self.error is None and self.broker_error is None and up

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "project": self.project,
            "redis": self.redis,
            "services": self.services,
            "console_url": self.console_url,
            "workers": [w.model_dump(mode="json") for w in self.workers],
            "beats": [b.model_dump(mode="json") for b in self.beats],
            "queue_depth": self.queue_depth,
            "running": self.running,
            "waiting": self.waiting,
            "active_sessions": self.active_sessions,
            "parked": self.parked,
            "fleet": self.fleet,
            "error": self.error,
            "broker_error": self.broker_error,
            "healthy": self.healthy,
        }


def collect_status(project: Path, settings: Settings) -> Status:
    """The local stack's services (if any), the workers, the queue and the runs in flight."""
    from tether.keys import RedisKeys
    from tether.persistence.active_index import active_count
    from tether.persistence.redis_conn import redis_from_url, translate_errors
    from tether.producer.ops.local_procs import is_running
    from tether.producer.ops.local_stack import StackPaths, read_state
    from tether.runs.presence import list_workers, queue_depth
    from tether.settings.checks import mask_url

    state = read_state(StackPaths(project.resolve()))
    info = Status(str(project), mask_url(settings.effective_redis_url))
    if state is not None:
        info.console_url = state.console_url
        info.services = [
            {
                **r.model_dump(include={"name", "kind", "pid", "port"}),
                "up": is_running(r),
                "log": _rel(r.log, project),
            }
            for r in state.services
        ]
    client = redis_from_url(settings.effective_redis_url, retry=None, socket_connect_timeout=2.0)
    keys = RedisKeys(settings.namespace)
    try:
        info.workers = list_workers(client, keys)
        info.beats = _beats(client, keys)
        queues = sorted({settings.queue, *(q for w in info.workers for q in w.queues)})
        if settings.effective_broker_url == settings.effective_redis_url:
            info.queue_depth = queue_depth(client, settings.namespace, queues)
        info.fleet = _fleet(client, keys, queues, settings)
        info.running = sorted({r for w in info.workers for r in w.current_runs})
        from tether.producer.ops.parked_runs import parked_rows  # here: `tether --help` stays light
        from tether.runs.queue.redis import RedisRunQueue

        runs = RedisRunQueue(client, keys, result_ttl_s=settings.result_ttl_s)
        info.waiting = [
            {"tenant": ref.tenant, "session_id": ref.session_id, "run_id": ref.run_id, "for": what}
            for ref, what in runs.waiting_runs()
        ]
        with translate_errors(mask_url(settings.effective_redis_url)):
            info.active_sessions = active_count(client, keys)
            info.parked = _parked(client, keys)
            info.waiting.extend(parked_rows(settings, client, keys))
    except TetherError as exc:
        info.error = str(exc)
    finally:
        client.close()
    from tether.producer.ops.reachability import check_broker

    try:
        check_broker(settings)
    except TetherError as exc:  # only the broker down used to exit 0
        info.broker_error = str(exc)
    return info


def _beats(client: Any, keys: Any) -> list[BeatPresence]:
    from tether.errors import PermissionDenied
    from tether.producer.schedules.presence import list_beats

    try:
        return list_beats(client, keys)
    except PermissionDenied:  # a tenant's credential: the beats are the operator's to see
        return []


def _fleet(client: Any, keys: Any, queues: list[str], settings: Settings) -> dict[str, Any]:
    from tether.runs.fleet import read_fleet_signals

    broker = client if settings.effective_broker_url == settings.effective_redis_url else None
    signals = read_fleet_signals(
        client, keys, queues, broker=broker, broker_namespace=settings.namespace
    )
    return signals.to_dict()


def status(as_json: JsonOption = False) -> None:
    """Show the local stack's services, the live workers and beats, queue depth and runs in
    flight.

    Exits 4 when a service of the local stack is down, or Redis or the broker does not answer.
    """
    from tether.producer.ops.render import emit_json, make_console

    project = Path.cwd()
    info = collect_status(project, cli_settings())
    if as_json:
        emit_json(info.to_dict())
    else:
        _print_status(make_console(), info, project)
    if not info.healthy:
        raise typer.Exit(EXIT_UNAVAILABLE)


def _print_status(console: Console, info: Status, project: Path) -> None:
    from rich.markup import escape
    from rich.table import Table

    from tether.producer.ops.local_stack import StackPaths, read_state

    state = read_state(StackPaths(project.resolve()))
    if state is None:
        console.print(f"no local stack in {escape(str(project))} (`tether up` starts one)")
    else:
        _print_services(console, state, project)
    console.print(f"redis: {escape(info.redis)}")
    if info.broker_error is not None:
        console.print(f"[bold red]broker unreachable[/]: {escape(info.broker_error)}")
    if info.error is not None:
        console.print(f"[bold red]redis unreachable[/]: {escape(info.error)}")
        return
    table = Table("worker", "node", "queues", "runs done", "running", "last seen", box=None)
    now_ms = int(time.time() * 1000)
    for w in info.workers:
        table.add_row(
            w.worker_id,
            w.node,
            ",".join(w.queues),
            str(w.runs_done),
            ",".join(w.current_runs) or "-",
            f"{w.age_s(now_ms):.1f} s ago",
        )
    console.print(f"workers: {len(info.workers)}")
    if info.workers:
        console.print(table)
    _print_beats(console, info.beats)
    depth = ", ".join(f"{q}: {n} waiting" for q, n in info.queue_depth.items()) or "n/a"
    console.print(f"queues: {depth}")
    console.print(
        f"runs in flight: {len(info.running)} running; active sessions: {info.active_sessions}"
    )
    if info.fleet:
        ages = info.fleet["oldest_queued_age_s"]
        oldest = ", ".join(f"{q}: {a:.1f} s" for q, a in ages.items()) or "none waiting"
        console.print(
            f"slots: {info.fleet['busy_slots']} busy of {info.fleet['slots']}; "
            f"oldest queued run: {oldest}"
        )
    if info.parked.get("timed"):
        console.print(
            f"parked on the fleet: {info.parked['timed']} call(s) woken at a time; next due "
            f"{info.parked['next_due']}"
        )
    for run in info.waiting:
        call = f" call {escape(run['call_id'])}" if "call_id" in run else ""
        console.print(
            f"  {escape(run['run_id'])} ({escape(run['tenant'])}/{escape(run['session_id'])})"
            f"{call}: waiting for {escape(run['for'])}"
        )
    if any("call_id" in run for run in info.waiting):
        console.print(
            "  (`tether wake SESSION_ID` wakes a parked call now; `tether cancel RUN_ID`)"
        )


def _parked(client: Any, keys: Any) -> dict[str, Any]:
    """The parked calls the timers index holds, and when the next is due (ISO UTC)."""
    from tether.core.waits import iso_ms
    from tether.observability.timed_waits import read_timed_waits

    timed, next_ms = read_timed_waits(client, keys)
    return {"timed": timed, "next_due": None if next_ms is None else iso_ms(next_ms)}


def _print_beats(console: Console, beats: list[BeatPresence]) -> None:
    from rich.markup import escape

    if not beats:
        console.print("beats: 0 (schedules do not fire; `tether beat` starts one)")
        return
    firing = next((b.beat_id for b in beats if b.ticking), None)
    refused = sum(sum(b.refused.values()) for b in beats)
    console.print(
        f"beats: {len(beats)}; firing the schedules: {escape(firing or 'none yet')}; "
        f"ticks submitted: {sum(b.fired for b in beats)}; entries refused: {refused}"
    )


def _print_services(console: Console, state: StackState, project: Path) -> None:
    from rich.markup import escape
    from rich.table import Table

    from tether.producer.ops.local_procs import is_running

    table = Table("service", "state", "pid", "address", "log", box=None)
    for record in state.services:
        up_now = is_running(record)
        address = f"127.0.0.1:{record.port}" if record.port else "-"
        if record.kind == "console" and state.console_url:
            address = state.console_url
        table.add_row(
            record.name,
            "[green]up[/]" if up_now else "[red]down[/]",
            str(record.pid),
            address,
            escape(_rel(record.log, project)),
        )
    console.print(table)
