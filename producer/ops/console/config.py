"""What a console serves and how: address, tenant, token, actions."""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import dataclass, field

from tether.errors import ConfigurationError
from tether.ids import validate_tenant

DEFAULT_PORT = 8765
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
#: A token shorter than this is refused: it would be guessable.
MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class ConsoleConfig:
    """How to run the console.

    Args:
        host: the address to bind (loopback by default).
        port: the port (0: any free port).
        tenant: the only tenant this console shows.
        token: required on every request when set (header, or the cookie ``?token=`` sets).
        actions: allow cancel, approve, reject, answer and fork.
        allowed_hosts: names besides loopback and ``host`` that requests may use as ``Host``
            (the console's DNS name behind a proxy; see :mod:`~tether.producer.ops.console.guard`).
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    tenant: str = "default"
    token: str | None = None
    actions: bool = False
    allowed_hosts: tuple[str, ...] = ()
    form_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    """A per-process secret every action form carries (no cross-site form can know it)."""

    def __post_init__(self) -> None:
        validate_tenant(self.tenant)
        if self.token is not None and len(self.token) < MIN_TOKEN_CHARS:
            raise ConfigurationError(
                f"--token is {len(self.token)} characters; use at least {MIN_TOKEN_CHARS} "
                "random ones, e.g. `python -c 'import secrets; print(secrets.token_urlsafe())'`"
            )
        if self.token is None and not is_loopback(self.host):
            raise ConfigurationError(
                f"refusing to serve the console on {self.host} without a token: anyone who can "
                "reach that address would see every session; pass --token (at least "
                f"{MIN_TOKEN_CHARS} random characters) or bind 127.0.0.1"
            )


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
