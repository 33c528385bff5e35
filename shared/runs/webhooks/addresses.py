"""Where a webhook may go: http(s) URLs whose host resolves only to public addresses, unless
``TETHER_WEBHOOK_ALLOW_PRIVATE`` allows loopback, private, link-local and reserved ones (a
webhook must not become a way into the deployment's own network)."""

from __future__ import annotations

import ipaddress
import socket
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tether.errors import ConfigurationError, InfrastructureError, InvalidInput
from tether.runs.options import check_webhook_url
from tether.settings.checks import mask_url

if TYPE_CHECKING:
    from tether.settings import Settings


def _refused(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


def check_destination(url: str, *, allow_private: bool) -> None:
    """Refuse ``url`` unless it is http(s) and every address its host resolves to is allowed.

    Raises:
        InvalidInput: naming the URL and the address refused.
        InfrastructureError: the host does not resolve now (naming it and the error).
    """
    try:
        check_webhook_url(url)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise InfrastructureError(
            f"webhook URL {mask_url(url)[:200]!r}: host {host!r} does not resolve ({exc}); "
            "check the URL and DNS"
        ) from None
    if allow_private:
        return
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if _refused(address):
            raise InvalidInput(
                f"webhook URL {mask_url(url)[:200]!r} points to {address}, a loopback, private or "
                "reserved address; use a public host, or set TETHER_WEBHOOK_ALLOW_PRIVATE=true "
                "to allow internal receivers"
            )


def check_webhook(settings: Settings, url: str, tenant: str) -> None:
    """What a producer checks before it submits a run with a webhook: the destination, and a
    signing secret for the tenant (a webhook is never sent unsigned).

    Raises:
        InvalidInput: a refused URL or address.
        ConfigurationError: no ``TETHER_WEBHOOK_SECRETS`` entry for ``tenant``.
        InfrastructureError: the host does not resolve.
    """
    check_destination(url, allow_private=settings.webhook_allow_private)
    if settings.webhook_secret_for(tenant) is None:
        raise ConfigurationError(
            f"a webhook for tenant {tenant!r} needs a signing secret: set TETHER_WEBHOOK_SECRETS "
            f'(e.g. {{"{tenant}": "..."}}) here and on the workers'
        )
