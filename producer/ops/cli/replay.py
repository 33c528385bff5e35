"""``tether replay | rerun``: check a recorded run against an agent offline; re-run it from a step.

``replay`` exits 0 when the replay is identical to the recording and 1 at the first divergence
(so CI can gate a new agent version on recorded production runs); bad input exits 2 (see
:mod:`tether.producer.ops.cli.support`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from tether.producer.ops.cli.runs import RunIdArg, WaitOption, print_outcome
from tether.producer.ops.cli.support import (
    EXIT_FAILED,
    JsonOption,
    TenantOption,
    cli_producer,
    cli_settings,
    open_reader,
)

if TYPE_CHECKING:
    from tether.producer.ops.rerun import Rerun

ReplaySessionOption = Annotated[
    str | None,
    typer.Option(
        "--session",
        help="The run's session (default: from the run's record; needed once it expired).",
    ),
]
ReplayAgentOption = Annotated[
    str | None,
    typer.Option(
        "--agent",
        "-a",
        help="The agent to replay with: MODULE:NAME (an Agent, a factory of one, or a "
        "TETHER_AGENTS entry) or a registered name (default: the agent the run ran with).",
    ),
]
ModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        help="recorded: play the recorded model answers back (default, offline); agent: ask "
        "the agent's own model (a deterministic agent whose decisions are code).",
    ),
]


def register(app: typer.Typer) -> None:
    """Add ``replay`` and ``rerun`` to ``app``."""
    app.command()(replay)
    app.command()(rerun)


def replay(
    run_id: RunIdArg,
    agent: ReplayAgentOption = None,
    session_id: ReplaySessionOption = None,
    model: ModelOption = "recorded",
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """Re-execute a recorded run offline (recorded model answers and tool results played back)
    and report `identical` (exit 0) or the first divergence (exit 1)."""
    import contextlib
    from dataclasses import asdict

    from tether.errors import InvalidInput
    from tether.producer.ops.render import emit_json
    from tether.producer.ops.replay import replay_recorded

    if model not in ("recorded", "agent"):
        raise InvalidInput(f"--model {model!r} is not one of: recorded, agent")
    mode: Literal["recorded", "agent"] = "agent" if model == "agent" else "recorded"
    settings = cli_settings()
    scope = tenant or settings.tenant
    reader = open_reader(settings)
    with contextlib.ExitStack() as stack:
        # the run's record names its session and agent: with both given, no Redis is needed
        producer = None if session_id and agent else stack.enter_context(cli_producer(settings))
        report = replay_recorded(
            reader,
            run_id,
            tenant=scope,
            session_id=session_id,
            producer=producer,
            agent=agent,
            agent_modules=settings.agent_modules,
            model=mode,
        )
    if as_json:
        emit_json({**asdict(report), "identical": report.identical})
    else:
        typer.echo(report.summary())
    if not report.identical:
        raise typer.Exit(EXIT_FAILED)


FromStepOption = Annotated[
    int,
    typer.Option(
        "--from-step",
        help="Go on from this step (steps count from 0, as in the events): steps before it "
        "are kept as recorded, none of their model or tool calls happens again.",
    ),
]
ForkSessionOption = Annotated[
    str | None,
    typer.Option("--session", help="The fork's session id (default: a new id)."),
]


def rerun(
    run_id: RunIdArg,
    from_step: FromStepOption,
    new_session_id: ForkSessionOption = None,
    tenant: TenantOption = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for the run and print its answer.")
    ] = False,
    wait_s: WaitOption = None,
    as_json: JsonOption = False,
) -> None:
    """Fork a run's session before a step and continue the run there on a worker; the
    original session is not touched. Prints the fork and the new run id."""
    from tether.producer.ops.render import emit_json
    from tether.producer.ops.rerun import rerun as start_rerun

    settings = cli_settings()
    with cli_producer(settings, broker=True) as producer:
        started = start_rerun(
            producer,
            open_reader(settings),
            run_id,
            from_step=from_step,
            new_session_id=new_session_id,
            tenant=tenant,
        )
        line = (
            f"rerun of {run_id} from step {from_step}: session {started.session_id}, "
            f"run {started.handle.run_id}"
        )
        if wait:
            # on stderr, before the wait: stdout is the answer (or its JSON), and the fork must
            # be known even if the wait is interrupted or times out
            typer.echo(line, err=True)
            print_outcome(started.handle, wait_s, as_json, producer=producer)
            return
    if as_json:
        emit_json(_started_json(started))
    else:
        typer.echo(line)


def _started_json(started: Rerun) -> dict[str, Any]:
    """The fork, where it forked, and the run going on in it."""
    handle = started.handle
    return {
        "run_id": handle.run_id,
        "session_id": started.session_id,
        "tenant": handle.tenant,
        "at_seq": started.at_seq,
        **started.mark.model_dump(mode="json"),
    }
