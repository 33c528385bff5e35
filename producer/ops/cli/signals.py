"""``tether signal``: send a named signal to a session, from any shell (``Producer.signal``);
``tether wake``: wake a session's calls parked on the fleet now (``Producer.wake``)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from tether.producer.ops.cli.runs import SessionArg
from tether.producer.ops.cli.support import (
    JsonOption,
    TenantOption,
    cli_producer,
    cli_settings,
    read_limited,
)

NameArg = Annotated[
    str, typer.Argument(metavar="NAME", help="The signal's name (what the tool waits for).")
]
PayloadArg = Annotated[
    str | None,
    typer.Argument(metavar="PAYLOAD-JSON", help="The payload, a JSON value (default: null)."),
]
PayloadFileOption = Annotated[
    str | None,
    typer.Option(
        "--payload-file",
        metavar="FILE",
        help="Read the JSON payload from FILE (- for standard input) instead of PAYLOAD-JSON.",
    ),
]


CallOption = Annotated[
    str | None,
    typer.Option(
        "--call",
        metavar="CALL_ID",
        help="Wake only this parked call (default: every call of the session parked on the fleet).",
    ),
]


def register(app: typer.Typer) -> None:
    """Add ``tether signal`` and ``tether wake`` to ``app``."""
    app.command()(signal)
    app.command()(wake)


def signal(
    session_id: SessionArg,
    name: NameArg,
    payload: PayloadArg = None,
    payload_file: PayloadFileOption = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """Send signal NAME with a JSON payload to a session: the run waiting for it goes on; one
    sent before the wait is kept for it. Prints the signal's id and the run it woke."""
    from tether.errors import InvalidInput
    from tether.producer.signals import parse_payload  # here: `tether --help` stays light

    settings = cli_settings()
    if payload is not None and payload_file is not None:
        raise InvalidInput("give the payload as PAYLOAD-JSON or with --payload-file, not both")
    where = "PAYLOAD-JSON"
    if payload_file is not None:
        data, where = read_limited(payload_file, settings.max_input_bytes, flag="--payload-file")
        payload = data.decode("utf-8", errors="replace")
    value = parse_payload(payload, where)
    ids = {"session id": session_id, "tenant": tenant}
    with cli_producer(settings, broker=True, ids=ids) as producer:
        sent = producer.signal(session_id, name, value, tenant=tenant)
    where = f"{tenant or settings.tenant}/{session_id}"
    if as_json:
        doc = {"signal_id": sent.signal_id, "session": where, "name": name}
        typer.echo(json.dumps({**doc, "woke_run_id": sent.woke_run_id}))
    elif sent.woke_run_id is not None:
        typer.echo(f"signal {name} {sent.signal_id} sent to {where}; woke {sent.woke_run_id}")
    else:
        typer.echo(f"signal {name} {sent.signal_id} sent to {where}; kept until a run waits for it")


def wake(
    session_id: SessionArg,
    call: CallOption = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """Wake a session's calls parked on the fleet now: what the fleet does at their wake time
    (a timer is due; a signal's or children's wait times out). Applied once, even racing the
    fleet's own wake. Prints the wake's run per call."""
    settings = cli_settings()
    ids = {"session id": session_id, "tenant": tenant}
    with cli_producer(settings, broker=True, ids=ids) as producer:
        calls = producer.wake(session_id, call, tenant=tenant)
    where = f"{tenant or settings.tenant}/{session_id}"
    if as_json:
        rows = [c._asdict() for c in calls]
        typer.echo(json.dumps({"session": where, "woken": rows}))
        return
    for c in calls:
        how = "its wake was already submitted" if c.duplicate else "woken"
        typer.echo(f"{where} call {c.call_id} ({c.waited_for}): {how}; run {c.run_id}")
