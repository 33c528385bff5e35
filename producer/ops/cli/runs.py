"""``tether run | submit | wait | cancel | tail``: runs on a deployment, from the shell.

``run`` and ``wait`` print the answer on stdout and a status line on stderr, so that
``answer=$(tether run s1 "hi" --agent echo)`` captures just the answer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from tether.errors import RunNotFound
from tether.producer.ops.cli.support import (
    EXIT_FAILED,
    FollowOption,
    InputFileOption,
    JsonOption,
    TenantOption,
    cli_producer,
    cli_settings,
    ctrl_c_stops,
    exit_code_for,
    one_line,
    run_input,
    warn_line,
)
from tether.runs.option_docs import OPTION_HELP, RUN_OPTIONS

# `tether --help` imports this module to read the commands' options: the producer (Celery,
# kombu, redis-py), the run protocol (its pydantic models) and rich are imported by the
# functions that use them; the options' help comes from their pydantic-free descriptions.
if TYPE_CHECKING:
    from rich.console import Console

    from tether.core.events import AgentEvent
    from tether.keys import RedisKeys
    from tether.persistence.streams.redis import RedisEventStream
    from tether.producer.client import Producer
    from tether.producer.handle import RunHandle
    from tether.runs.contract import RunResult
    from tether.runs.options import RunOptionsKwargs
    from tether.settings import Settings


def option_help(name: str, more: str = "") -> str:
    """The help of run option ``name``: the description :class:`RunOptions` declares it with
    (``tether.runs.option_docs``), where the options are declared (and validated) once."""
    return f"{OPTION_HELP[name]}{more}"


SessionArg = Annotated[str, typer.Argument(metavar="SESSION", help="Session id.")]
InputArg = Annotated[
    str | None,
    typer.Argument(
        metavar="INPUT", help="The run's input text (or --input-file).", show_default=False
    ),
]
AgentOption = Annotated[str, typer.Option("--agent", "-a", help=option_help("agent"))]
RunIdArg = Annotated[str, typer.Argument(metavar="RUN_ID", help="The run id.")]
WaitOption = Annotated[
    float | None,
    typer.Option("--wait-s", min=0, help="Give up waiting after this many seconds (exit 124)."),
]
RequestIdOption = Annotated[
    str | None, typer.Option("--request-id", help=option_help("request_id"))
]
#: How often a command past its start deadline checks that the run is still running.
STATUS_RECHECK_S = 1.0
RunTimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--timeout-s",
        min=0.001,
        help=option_help(
            "timeout_s",
            " `run` also stops waiting (exit 124) when no worker has started the run by then.",
        ),
    ),
]
BusyOption = Annotated[str | None, typer.Option("--on-busy", help=option_help("on_busy"))]
DurabilityOption = Annotated[
    str | None,
    typer.Option("--durability", metavar="run|step", help=option_help("durability")),
]
WebhookOption = Annotated[str | None, typer.Option("--webhook", help=option_help("webhook"))]


def register(app: typer.Typer) -> None:
    """Add the run commands to ``app``."""
    app.command("run")(run_command)
    app.command()(submit)
    app.command()(wait)
    app.command()(cancel)
    app.command()(tail)


def run_options(params: dict[str, Any]) -> RunOptionsKwargs:
    """The run options among a command's parameters (``locals()`` on entry): a parameter named
    as a :class:`RunOptions` field is that option, passed on as given, so the request it makes
    validates it (one place) and no command restates the options' names or defaults (an option
    left out, None, takes the model's)."""
    options = {k: v for k, v in params.items() if k in RUN_OPTIONS and v is not None}
    return cast("RunOptionsKwargs", options)


def _check_request(
    settings: Settings, session_id: str, text: str | None, options: RunOptionsKwargs
) -> None:
    """Validate the run as the producer will (ids, input, options; no I/O), so bad input is
    refused (exit 2) before any service is looked at, never reported as an unreachable Redis.

    Raises:
        InvalidInput: as the producer's own validation.
    """
    from tether.producer.submission import build_request, run_spec

    build_request(settings, run_spec(session_id, text, **options), trace=None)


def run_command(
    session_id: SessionArg,
    agent: AgentOption,
    text: InputArg = None,
    input_file: InputFileOption = None,
    tenant: TenantOption = None,
    request_id: RequestIdOption = None,
    timeout_s: RunTimeoutOption = None,
    on_busy: BusyOption = None,
    durability: DurabilityOption = None,
    webhook: WebhookOption = None,
    wait_s: WaitOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run an agent on a session, wait, and print the answer.

    Warns on stderr within seconds when no live worker consumes the queue.
    """
    options = run_options(locals())
    from tether.producer.worker_watch import watch_for_workers

    settings = cli_settings()
    text = run_input(text, input_file, settings.max_input_bytes)
    _check_request(settings, session_id, text, options)
    with cli_producer(settings, broker=True) as producer:
        handle = producer.run_async(session_id, text, **options)
        try:
            with watch_for_workers(producer, handle.run_id, warn=warn_line):
                print_outcome(handle, wait_s, as_json, start_by_s=timeout_s, producer=producer)
        except KeyboardInterrupt:
            # the run goes on without this process: say which one it is, or it is lost to
            # the user (only its id cancels it or waits for it)
            typer.echo(
                f"interrupted: run {handle.run_id} goes on: cancel it with `tether cancel "
                f"{handle.run_id}` or wait for it with `tether wait {handle.run_id}`",
                err=True,
            )
            raise


def submit(
    session_id: SessionArg,
    agent: AgentOption,
    text: InputArg = None,
    input_file: InputFileOption = None,
    tenant: TenantOption = None,
    request_id: RequestIdOption = None,
    timeout_s: RunTimeoutOption = None,
    on_busy: BusyOption = None,
    durability: DurabilityOption = None,
    webhook: WebhookOption = None,
    as_json: JsonOption = False,
) -> None:
    """Enqueue a run and print its run id (follow it with `tether wait RUN_ID`)."""
    options = run_options(locals())
    from tether.producer.ops.render import emit_json
    from tether.producer.worker_watch import warn_if_unconsumed

    settings = cli_settings()
    text = run_input(text, input_file, settings.max_input_bytes)
    _check_request(settings, session_id, text, options)
    with cli_producer(settings, broker=True) as producer:
        handle = producer.run_async(session_id, text, **options)
        warn_if_unconsumed(producer, warn_line)
        if as_json:
            emit_json(
                {
                    "run_id": handle.run_id,
                    "request_id": handle.request_id,
                    "session_id": handle.session_id,
                    "tenant": handle.tenant,
                }
            )
        else:
            typer.echo(handle.run_id)


def wait(
    run_id: RunIdArg,
    wait_s: WaitOption = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
    follow: FollowOption = False,
) -> None:
    """Wait for a run of the tenant and print its answer."""
    from tether.producer.worker_watch import watch_for_workers

    with cli_producer(ids={"run id": run_id, "tenant": tenant}) as producer:
        scope = tenant or producer.settings.tenant
        _known(producer, run_id, scope)
        with watch_for_workers(producer, run_id, warn=warn_line):
            handle = producer.handle(run_id, tenant=scope)
            if follow:
                try:
                    handle = handle.follow_to_end(wait_s)
                except TimeoutError:
                    raise _gave_up(run_id, "WAITING", wait_s or 0.0) from None
            print_outcome(handle, wait_s, as_json, producer=producer)


def cancel(run_id: RunIdArg, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """Ask a run of the tenant to stop: queued, it never starts; running, it rolls back.

    A running run stops at its next step boundary. Exits 1 when the run had already finished.
    """
    from tether.producer.ops.render import emit_json
    from tether.runs.queue.base import CancelOutcome

    with cli_producer(ids={"run id": run_id, "tenant": tenant}) as producer:
        scope = tenant or producer.settings.tenant
        status = _known(producer, run_id, scope)
        outcome = producer.cancel(run_id, tenant=scope)
        requested = outcome in (CancelOutcome.CANCELLED, CancelOutcome.REQUESTED)
        if as_json:
            emit_json(
                {
                    "run_id": run_id,
                    "cancel_requested": requested,
                    "outcome": outcome.value,
                    "status": status,
                }
            )
        elif outcome is CancelOutcome.CANCELLED:
            typer.echo(f"run {run_id} cancelled before it started")
        elif requested:
            typer.echo(f"cancel requested for run {run_id} (was {status})")
        else:
            typer.echo(f"run {run_id} already finished ({status}); nothing to cancel", err=True)
        if not requested:
            raise typer.Exit(EXIT_FAILED)


def tail(
    session_id: SessionArg,
    tenant: TenantOption = None,
    from_seq: Annotated[
        int, typer.Option("--from-seq", min=1, help="First sequence number to show.")
    ] = 1,
    idle_timeout_s: Annotated[
        float | None,
        typer.Option(
            "--idle-timeout",
            "--idle-timeout-s",
            min=0.001,
            help="Stop after this many seconds without events (default: follow forever).",
        ),
    ] = None,
    as_json: JsonOption = False,
    tokens: Annotated[
        bool,
        typer.Option(
            "--tokens",
            help="Also print the model's text as it streams (the pieces of the step under way).",
        ),
    ] = False,
) -> None:
    """Follow a session's events live, coloured by type (Ctrl-C to stop)."""
    from tether.ids import validate_id
    from tether.keys import RedisKeys
    from tether.persistence.redis_conn import redis_from_url
    from tether.persistence.streams.redis import RedisEventStream
    from tether.producer.ops.reachability import check_redis
    from tether.producer.ops.render import make_console
    from tether.producer.submission import acting_for

    validate_id(session_id)  # bad input is refused before any service is looked at
    if tenant is not None:
        validate_id(tenant, kind="tenant")
    settings = cli_settings()
    check_redis(settings, notice=warn_line)  # within seconds, naming it, when it is down
    client = redis_from_url(settings.effective_redis_url)
    keys = RedisKeys(settings.namespace)
    stream = RedisEventStream(client, keys=keys)
    console = make_console()
    target = (tenant or settings.tenant, session_id)
    follow = _Follow(after_seq=from_seq - 1, idle_timeout_s=idle_timeout_s)
    try:
        # another tenant's session: "not your tenant", as every other verb says
        with ctrl_c_stops(), acting_for(settings, [target[0]]):
            if tokens:
                _follow_tokens(stream, (client, keys), target, follow, console, as_json)
            else:
                _follow_events(stream, target, follow, console, as_json)
    finally:
        client.close()


@dataclass(frozen=True)
class _Follow:
    """Where ``tail`` starts in the session's log, and how long it waits for the next event."""

    after_seq: int
    idle_timeout_s: float | None
    block_ms: int = 1000


def _follow_events(
    stream: RedisEventStream,
    target: tuple[str, str],
    follow: _Follow,
    console: Console,
    as_json: bool,
) -> None:
    events = stream.tail(
        *target,
        after_seq=follow.after_seq,
        block_ms=follow.block_ms,
        idle_timeout_s=follow.idle_timeout_s,
    )
    shown = _print_events(events, as_json, console)
    if not shown and follow.after_seq == 0 and follow.idle_timeout_s is not None:
        # a mistyped id reads like a quiet session: say so (a session that starts later is
        # fine, which is why this is a note, not an error)
        tenant, session_id = target
        warn_line(
            f"no event of session {tenant}/{session_id} came within "
            f"{follow.idle_timeout_s:g} s (a new session, or a mistyped id: see "
            f"'tether sessions list --tenant {tenant}')"
        )


def _follow_tokens(
    stream: RedisEventStream,
    redis: tuple[Any, RedisKeys],
    target: tuple[str, str],
    follow: _Follow,
    console: Console,
    as_json: bool,
) -> None:
    """The events with the model's text as it streams, through the session's live feed."""
    from tether.persistence.deltas.live_redis import RedisLiveFeed
    from tether.persistence.deltas.redis import RedisDeltaChannel
    from tether.producer.ops.live_tokens import TokenPrinter

    live = RedisLiveFeed(stream, RedisDeltaChannel(*redis))
    items = live.follow(
        *target,
        after_seq=follow.after_seq,
        block_ms=follow.block_ms,
        idle_timeout_s=follow.idle_timeout_s,
    )
    TokenPrinter(console, as_json=as_json).show_all(items)


def _print_events(events: Iterator[AgentEvent], as_json: bool, console: Console) -> int:
    """Print ``events``; how many there were."""
    from tether.core.events import event_to_dict
    from tether.producer.ops.render import emit_json, event_text

    count = 0
    for event in events:
        count += 1
        if as_json:
            emit_json(event_to_dict(event), lines=True)
        else:
            console.print(event_text(event))
    return count


def _known(producer: Producer, run_id: str, tenant: str) -> str:
    from tether.producer.submission import scoped_view

    view = scoped_view(producer.record(run_id, tenant=tenant), tenant)
    if view is None:  # another tenant's run reads exactly like an unknown one
        raise RunNotFound(
            f"run {run_id!r} not found for tenant {tenant!r} (unknown, another tenant's, or its "
            "record expired after TETHER_RESULT_TTL_S); check the id and --tenant"
        )
    return view.status


def await_result(
    handle: RunHandle,
    wait_s: float | None,
    start_by_s: float | None = None,
    *,
    producer: Producer | None = None,
) -> RunResult:
    """The run's result, waiting at most ``wait_s``, and only ``start_by_s`` while it is queued.

    Raises:
        TimeoutError: a deadline passed; the message says whether the run is still queued or
            running, and how to cancel it or wait for it.
    """
    from tether.runs.queue.base import RunState

    started = time.monotonic()
    wait_until = None if wait_s is None else started + wait_s
    queued_until = None if start_by_s is None else started + start_by_s
    while True:
        now = time.monotonic()
        pending = [d - now for d in (wait_until, queued_until) if d is not None and d > now]
        slice_s = min(pending) if pending else None
        if queued_until is not None and now >= queued_until:
            # running past its start deadline: the worker enforces its limit; look again soon
            slice_s = min(slice_s or STATUS_RECHECK_S, STATUS_RECHECK_S)
        try:
            return handle.run_result(timeout=slice_s)
        except TimeoutError:
            pass
        status = _status(handle, producer)
        waited_s = time.monotonic() - started
        if wait_until is not None and started + waited_s >= wait_until:
            raise _gave_up(handle.run_id, status, waited_s) from None
        if queued_until is not None and status == RunState.QUEUED:
            raise _gave_up(handle.run_id, status, waited_s) from None


def _status(handle: RunHandle, producer: Producer | None) -> str:
    from tether.runs.queue.base import RunState

    if producer is None:
        return RunState.RUNNING if handle.running() else RunState.QUEUED
    view = producer.record(handle.run_id, tenant=handle.tenant)
    return "UNKNOWN" if view is None else view.status


def _gave_up(run_id: str, status: str, waited_s: float) -> TimeoutError:
    from tether.runs.queue.base import RunState

    how = f"cancel it with `tether cancel {run_id}` or wait for it with `tether wait {run_id}`"
    if status == RunState.QUEUED:
        return TimeoutError(
            f"run {run_id} is still queued after {waited_s:.1f} s (no worker has started it); {how}"
        )
    return TimeoutError(
        f"run {run_id} did not finish within {waited_s:.1f} s ({status.lower()}); it goes on: {how}"
    )


def print_outcome(
    handle: RunHandle,
    wait_s: float | None,
    as_json: bool,
    *,
    start_by_s: float | None = None,
    producer: Producer | None = None,
) -> None:
    """Wait for ``handle`` (see :func:`await_result`) and print its answer (a WAITING run: the
    calls it waits on)."""
    from tether.producer.ops.render import emit_json, make_console, result_line

    result = await_result(handle, wait_s, start_by_s, producer=producer)
    if as_json:
        emit_json(result.model_dump(mode="json"))
    elif result.ok:
        typer.echo(result.output or "")
        make_console(stderr=True).print(result_line(result))
        for call in result.pending:
            verb = "approve" if call.reason == "approval" else "answer"
            typer.echo(
                f"waiting on {call.call_id}: {call.tool}({call.arguments}) -> "
                f"tether {verb} {result.session_id} {call.call_id} ...",
                err=True,
            )
    else:
        typer.echo(one_line(f"error: run {result.run_id} {_failure(result)}"), err=True)
    if not result.ok:
        raise typer.Exit(_exit_code(result))


def _failure(result: RunResult) -> str:
    from tether.core.results import RunStatus

    if result.status is RunStatus.CANCELLED:
        return "was cancelled"
    return f"failed: {result.error_type}: {result.error_message}"


def _exit_code(result: RunResult) -> int:
    error = result.error()
    return exit_code_for(error) if error is not None else EXIT_FAILED
