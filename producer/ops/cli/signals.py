"""``tether signal``: send a named signal to a session, from any shell (``Producer.signal``)."""

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


def register(app: typer.Typer) -> None:
    """Add ``tether signal`` to ``app``."""
    app.command()(signal)


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
