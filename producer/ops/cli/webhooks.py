"""``tether webhooks dead | redeliver``: the deliveries that ran out of attempts."""

from __future__ import annotations

from typing import Annotated

import typer

from tether.producer.ops.cli.support import JsonOption, TenantOption, cli_producer

webhooks_app = typer.Typer(
    help="Webhook deliveries that ran out of attempts: list and redeliver.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    """Add ``tether webhooks`` to ``app``."""
    app.add_typer(webhooks_app, name="webhooks")


@webhooks_app.command()
def dead(
    tenant: TenantOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 100,
    as_json: JsonOption = False,
) -> None:
    """List the dead webhook deliveries, newest first (all tenants unless --tenant)."""
    from tether.producer.ops.render import emit_json
    from tether.producer.ops.webhooks_admin import dead_letters

    with cli_producer() as producer:
        letters = dead_letters(producer).list(tenant=tenant, limit=limit)
    if as_json:
        emit_json([d.model_dump(mode="json", exclude={"body"}) for d in letters])
        return
    for d in letters:
        typer.echo(
            f"{d.id}  {d.tenant}/{d.session_id}  {d.status}  {d.url}  "
            f"{d.attempts} attempt(s): {d.last_error}"
        )
    if not letters:
        typer.echo("no dead webhook deliveries")


@webhooks_app.command()
def redeliver(
    delivery_id: Annotated[str, typer.Argument(metavar="ID", help="The delivery's id.")],
    tenant: TenantOption = None,
) -> None:
    """Queue a dead delivery again (same id and body, fresh attempts)."""
    from tether.producer.ops.webhooks_admin import redeliver as requeue

    with cli_producer(broker=True) as producer:
        again = requeue(producer, delivery_id, tenant=tenant)
    typer.echo(f"webhook {again.id} queued for delivery to {again.url}")
