"""``tether signal``: send a named signal to a session, from any shell (``Producer.signal``)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from tether.producer.ops.cli.runs import SessionArg
from tether.producer.ops.cli.support import JsonOption, TenantOption, cli_producer, cli_settings

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


def payload_of(text: str | None, payload_file: str | None, max_bytes: int) -> object:
    """The payload: ``PAYLOAD-JSON``, or ``--payload-file F`` (``-``: standard input), parsed.

    Raises:
        InvalidInput: both given, a file that cannot be read, text that is not JSON.
        InputTooLarge: a file over ``max_bytes`` (``TETHER_MAX_INPUT_BYTES``).
    """
    from tether.errors import InputTooLarge, InvalidInput

    if text is not None and payload_file is not None:
        raise InvalidInput("give the payload as PAYLOAD-JSON or with --payload-file, not both")
    where = "PAYLOAD-JSON"
    if payload_file is not None:
        where = "standard input" if payload_file == "-" else f"--payload-file {payload_file}"
        try:
            if payload_file == "-":
                data = sys.stdin.buffer.read(max_bytes + 1)
            else:
                with open(payload_file, "rb") as fh:
                    data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise InvalidInput(f"{where} cannot be read ({exc.strerror})") from None
        if len(data) > max_bytes:
            raise InputTooLarge(
                f"{where} holds more than {max_bytes} bytes, over the limit of {max_bytes} "
                "(TETHER_MAX_INPUT_BYTES); send less, or a reference to it"
            )
        text = data.decode("utf-8", errors="replace")
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidInput(
            f"{where} is not JSON ({exc}); quote a string payload as JSON, e.g. '\"yes\"'"
        ) from None


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
    settings = cli_settings()
    value = payload_of(payload, payload_file, settings.max_input_bytes)
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
