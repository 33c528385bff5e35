"""``tether tenants acl TENANT``: the Redis ACL user of one tenant's producers, as the trust
model gives it (docs/trust-model.md), printed as the command an operator runs."""

from __future__ import annotations

from typing import Annotated

import typer

from tether.producer.ops.cli.support import cli_settings

tenants_app = typer.Typer(help="Per-tenant credentials: the Redis ACL rules.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add ``tether tenants`` to ``app``."""
    app.add_typer(tenants_app, name="tenants")


@tenants_app.command()
def acl(
    tenant: Annotated[str, typer.Argument(help="The tenant whose producers the user is for.")],
    password: Annotated[
        str, typer.Option("--password", help="Put this password in the command.")
    ] = "PASSWORD",
) -> None:
    """Print the ACL SETUSER command of TENANT's producer user: its own keys, its producers'
    feeds, its usage read-only, the broker's keys; no key shared with another tenant."""
    from tether.keys import RedisKeys
    from tether.runs.celery_config import broker_acl_keys

    settings = cli_settings()
    keys = RedisKeys(settings.namespace)
    rules = [*keys.tenant_acl_keys(tenant), *broker_acl_keys(settings)]
    typer.echo(
        f"ACL SETUSER {tenant} reset on >{password} "
        + " ".join(rules)
        + " +@all -@admin -@dangerous"
    )
