"""``tether autoscale``: run the local autoscaling supervisor in the foreground (see
:mod:`tether.producer.ops.autoscale.supervisor`); ``tether up --autoscale MIN:MAX`` starts it as
a service of the local stack."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tether.errors import UsageError

if TYPE_CHECKING:
    from tether.producer.ops.autoscale.policy import ScalePolicy
    from tether.settings import Settings


def parse_bounds(text: str) -> tuple[int, int]:
    """``"MIN:MAX"`` as two integers.

    Raises:
        UsageError: not two integers with ``0 <= MIN <= MAX``, ``MAX >= 1``.
    """
    low, sep, high = text.partition(":")
    try:
        bounds = (int(low), int(high)) if sep else None
    except ValueError:
        bounds = None
    if bounds is None or not 0 <= bounds[0] <= bounds[1] or bounds[1] < 1:
        raise UsageError(
            f"--autoscale {text!r} is not MIN:MAX worker counts; give two integers with "
            "0 <= MIN <= MAX and MAX >= 1, e.g. --autoscale 1:4"
        )
    return bounds


#: The command-line option of each policy field whose name differs.
_OPTION_OF = {
    "": "--min/--max",
    "min_workers": "--min",
    "max_workers": "--max",
    "slots_per_worker": "--concurrency",
}


#: The longest wait between two readings (a longer one is no autoscaling).
MAX_INTERVAL_S = 3600.0


def make_policy(**fields: float) -> ScalePolicy:
    """A validated :class:`ScalePolicy`; a bad value is one :class:`UsageError`."""
    import pydantic

    from tether.producer.ops.autoscale.policy import ScalePolicy

    try:
        return ScalePolicy.model_validate(fields)
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        name = _OPTION_OF.get(field, "--" + field.replace("_", "-"))
        raise UsageError(
            f"tether autoscale {name}: {error['msg']}; see tether autoscale --help"
        ) from exc


def worker_env(settings: Settings) -> dict[str, str]:
    """The workers' environment: this one, plus the settings this command resolved (the local
    stack's ``.tether/env``, a relative ``file://`` store made absolute)."""
    import os

    env = dict(os.environ)
    env["TETHER_BROKER_URL"] = settings.effective_broker_url
    env["TETHER_STORE_URL"] = settings.store_url
    if settings.redis_url is not None:
        env["TETHER_REDIS_URL"] = settings.redis_url
    return env


# The command's surface, one alias per option so the command itself reads as its steps.
MinOption = Annotated[int, typer.Option("--min", help="Fewest workers.")]
MaxOption = Annotated[int, typer.Option("--max", help="Most workers.")]
ConcurrencyOption = Annotated[
    int, typer.Option("--concurrency", "-c", help="Pool size per worker.")
]
QueueOption = Annotated[str | None, typer.Option("--queue", "-Q", help="The queue (TETHER_QUEUE).")]
IntervalOption = Annotated[
    float, typer.Option("--interval-s", min=0.1, help="Seconds between readings.")
]
IdleOption = Annotated[float, typer.Option("--idle-s", help="Idle this long before scaling in.")]
MaxWaitOption = Annotated[
    float, typer.Option("--max-wait-s", help="Scale out when a run waited longer.")
]
BacklogOption = Annotated[
    float, typer.Option("--backlog-per-slot", help="Scale out above this many queued/slot.")
]
CooldownOption = Annotated[
    float, typer.Option("--cooldown-s", help="No change this soon after one.")
]
StopTimeoutOption = Annotated[
    float, typer.Option("--stop-timeout-s", min=1, help="Kill a stopping worker after.")
]
LogDirOption = Annotated[
    Path | None, typer.Option("--log-dir", help="Worker logs (default .tether/logs).")
]


def autoscale(
    min_workers: MinOption = 1,
    max_workers: MaxOption = 4,
    concurrency: ConcurrencyOption = 1,
    queue: QueueOption = None,
    interval_s: IntervalOption = 1.0,
    idle_s: IdleOption = 15.0,
    max_wait_s: MaxWaitOption = 5.0,
    backlog_per_slot: BacklogOption = 1.0,
    cooldown_s: CooldownOption = 3.0,
    stop_timeout_s: StopTimeoutOption = 60.0,
    log_dir: LogDirOption = None,
) -> None:
    """Start and stop worker processes on the queue's load, until Ctrl-C or SIGTERM.

    Scales out when queued runs per slot exceed --backlog-per-slot or the oldest waited over
    --max-wait-s; scales in after --idle-s with nothing queued, by warm shutdown (a running
    run is handed back at its last checkpoint).
    """
    from tether.producer.ops.cli.support import cli_settings

    policy = make_policy(
        min_workers=min_workers,
        max_workers=max_workers,
        slots_per_worker=concurrency,
        idle_s=idle_s,
        max_wait_s=max_wait_s,
        backlog_per_slot=backlog_per_slot,
        cooldown_s=cooldown_s,
    )
    _check_interval(interval_s)
    _supervise(
        cli_settings(),
        policy,
        queue,
        interval_s=interval_s,
        stop_timeout_s=stop_timeout_s,
        log_dir=log_dir or Path(".tether/logs").resolve(),
    )


def _check_interval(interval_s: float) -> None:
    if not interval_s <= MAX_INTERVAL_S:  # inf and nan too: a sleep that long overflowed
        raise UsageError(
            f"tether autoscale --interval-s: must be at most {MAX_INTERVAL_S:g} s, got "
            f"{interval_s:g}; see tether autoscale --help"
        )


def _supervise(
    settings: Settings,
    policy: ScalePolicy,
    queue: str | None,
    *,
    interval_s: float,
    stop_timeout_s: float,
    log_dir: Path,
) -> None:
    """Run the supervisor in the foreground until SIGTERM or SIGINT sets its stop."""
    import signal
    import threading

    from tether.producer.ops.autoscale.supervisor import FleetProbe, Supervisor

    probe = FleetProbe(settings, queue or settings.queue)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    supervisor = Supervisor(
        probe,
        policy,
        env=worker_env(settings),
        log_dir=log_dir,
        say=lambda line: typer.echo(f"autoscale: {line}"),
        stop_timeout_s=stop_timeout_s,
    )
    typer.echo(
        f"autoscale: queue {probe.queue}, {policy.min_workers}..{policy.max_workers} workers of "
        f"{policy.slots_per_worker} slot(s); Ctrl-C stops it and its workers"
    )
    try:
        supervisor.run(stop, interval_s)
    finally:
        probe.close()
    typer.echo("autoscale: stopped")


def register(app: typer.Typer) -> None:
    """Add ``tether autoscale`` to the CLI."""
    app.command(name="autoscale")(autoscale)
