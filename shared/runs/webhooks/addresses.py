"""Where a webhook may go: http(s) URLs whose host resolves only to public addresses, unless
``TETHER_WEBHOOK_ALLOW_PRIVATE`` allows loopback, private, link-local and reserved ones (a
webhook must not become a way into the deployment's own network).

An IPv6 address that embeds an IPv4 one (IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible
``::a.b.c.d``, 6to4 ``2002::/16``, Teredo ``2001::/32``, NAT64 ``64:ff9b::/96``) is refused when
the IPv4 address is, since a relay or a dual-stack host may deliver it there; the local-use NAT64
prefix ``64:ff9b:1::/48`` is refused whole.

:func:`check_destination` resolves the host once and returns the addresses it checked: the
sender connects to those (:mod:`tether.runs.webhooks.transport`), never resolving again, so a
DNS answer that changes after the check (rebinding) cannot lead to an address it refused.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tether.errors import ConfigurationError, InfrastructureError, InvalidInput
from tether.runs.options import check_webhook_url
from tether.settings.checks import mask_url

if TYPE_CHECKING:
    from tether.settings import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: Resolves ``(host, port)`` to addresses as text (a scope may follow ``%``); raises OSError.
Resolver = Callable[[str, int], Sequence[str]]

_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses ``getaddrinfo`` gives for ``host`` (TCP)."""
    infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses ``address`` carries (see the module docstring), if any."""
    found: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _IPV4_COMPATIBLE and int(address) > 1:  # :: and ::1 embed nothing
        found.append(low32)
    if address in _NAT64:
        found.append(low32)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)  # the relay and the client it reaches
    return found


def _not_public(address: IPAddress) -> bool:
    return (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


def refused_address(address: IPAddress) -> bool:
    """True when a webhook may not go to ``address`` without TETHER_WEBHOOK_ALLOW_PRIVATE."""
    if isinstance(address, ipaddress.IPv4Address):
        return _not_public(address)
    if address.ipv4_mapped is not None:  # an IPv4 address in IPv6 clothing: judged as IPv4
        return _not_public(address.ipv4_mapped)
    if address in _NAT64_LOCAL:
        return True
    return _not_public(address) or any(_not_public(v4) for v4 in embedded_ipv4(address))


@dataclass(frozen=True)
class Destination:
    """A checked URL's host, port and the addresses to connect to (as the resolver gave them)."""

    host: str
    port: int
    addresses: tuple[str, ...]


def check_destination(
    url: str,
    *,
    allow_private: bool,
    resolve: Resolver = system_resolver,
    timeout_s: float | None = None,
) -> Destination:
    """Refuse ``url`` unless it is http(s) and every address its host resolves to is allowed;
    the addresses checked.

    Args:
        url: the webhook URL.
        allow_private: TETHER_WEBHOOK_ALLOW_PRIVATE.
        resolve: how the host is resolved (the system's resolver; tests give their own).
        timeout_s: give up resolving after this long (None: wait for the resolver).

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
    addresses = tuple(dict.fromkeys(_resolved(url, host, port, resolve, timeout_s)))
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if not allow_private and refused_address(address):
            raise InvalidInput(
                f"webhook URL {mask_url(url)[:200]!r} points to {address}, a loopback, private or "
                "reserved address; use a public host, or set TETHER_WEBHOOK_ALLOW_PRIVATE=true "
                "to allow internal receivers"
            )
    return Destination(host, port, addresses)


def _resolved(
    url: str, host: str, port: int, resolve: Resolver, timeout_s: float | None
) -> Sequence[str]:
    """``resolve(host, port)``, within ``timeout_s``: a resolver cannot be interrupted, so it
    runs in a thread of its own that is left to finish when the time is up (the attempt's
    deadline holds even for a name server that answers slowly on purpose)."""
    outcome: list[Sequence[str] | BaseException] = []

    def run() -> None:
        try:
            outcome.append(resolve(host, port))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)

    if timeout_s is None:
        run()
    else:
        worker = threading.Thread(target=run, name="webhook-resolve", daemon=True)
        worker.start()
        worker.join(timeout_s)
    if not outcome:
        raise InfrastructureError(
            f"webhook URL {mask_url(url)[:200]!r}: host {host!r} did not resolve within "
            f"{timeout_s:g} s (TETHER_WEBHOOK_TIMEOUT_S); check the URL and DNS"
        )
    found = outcome[0]
    if isinstance(found, (OSError, UnicodeError)):
        raise InfrastructureError(
            f"webhook URL {mask_url(url)[:200]!r}: host {host!r} does not resolve ({found}); "
            "check the URL and DNS"
        ) from None
    if isinstance(found, BaseException):
        raise found
    if not found:
        raise InfrastructureError(
            f"webhook URL {mask_url(url)[:200]!r}: host {host!r} resolves to no address; "
            "check the URL and DNS"
        )
    return found


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
