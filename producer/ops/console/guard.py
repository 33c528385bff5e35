"""What every console request and response passes through: the ``Host`` allow-list, the
``Origin`` check of actions, and headers that forbid framing (plain ASGI: the live feeds stream).

Why (#29, N4): a console on loopback needs no token, so a page on another site could reach it by
DNS rebinding (its own name resolving to 127.0.0.1: the browser then sends that name as
``Host``), read the form key and post actions; and a page that framed the runs page got a
cancel with one click on the framed button. So:

- A request whose ``Host`` is not a loopback name, the bind address or a configured name
  (``TETHER_CONSOLE_HOSTS``, ``tether console --allow-host``) is refused with 421.
- A POST whose ``Origin`` is not the console's own (``null`` included) is refused with 403;
  browsers send ``Origin`` on every cross-site POST, so a form on another site never gets in.
- Every response says ``X-Frame-Options: DENY`` and a strict ``Content-Security-Policy`` with
  ``frame-ancestors 'none'`` (the console's pages load only their own script and style).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.producer.ops.console.config import LOOPBACK_NAMES

#: The policy of every response: nothing but the console's own files, never inside a frame.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
#: The policy of a self-contained page (a batch report: inline script and style, embedded
#: images): it may run its own inline code and fetch nothing, anywhere.
SELF_CONTAINED_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "x-frame-options": "DENY",
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    # not no-referrer: under it browsers send "Origin: null" on the console's own form posts
    "referrer-policy": "same-origin",
}
_LOOPBACK_ADDRESSES = frozenset({"127.0.0.1", "::1"})


def host_name(host_header: str) -> str:
    """The name of a ``Host`` header, without its port (``[::1]:8765`` -> ``::1``)."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def allowed_hosts(bind: str, configured: Iterable[str]) -> frozenset[str]:
    """Loopback names and addresses, the bind address and the configured names (lower case)."""
    names = {*LOOPBACK_NAMES, *_LOOPBACK_ADDRESSES, host_name(bind)}
    return frozenset(n for n in names | {host_name(c) for c in configured} if n)


class SiteGuard:
    """Refuses other hosts (421) and cross-origin POSTs (403); adds the security headers."""

    def __init__(self, app: ASGIApp, *, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    if name not in headers:  # a page may narrow its own (the batch report)
                        headers[name] = value
            await send(message)

        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send_secured)
            return
        await self.app(scope, receive, send_secured)

    def _refusal(self, scope: Scope) -> PlainTextResponse | None:
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if host_name(host) not in self.hosts:
            return PlainTextResponse(
                f"this console does not answer to host {host!r}; open it by a loopback name or "
                "its bind address, or allow the name with TETHER_CONSOLE_HOSTS (or "
                "`tether console --allow-host NAME`)",
                status_code=421,
            )
        origin = headers.get("origin")
        if scope["method"] == "POST" and origin is not None:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or parts.netloc.lower() != host.lower():
                return PlainTextResponse(
                    f"refusing a {scope['method']} from origin {origin!r}: actions are taken "
                    "only from the console's own pages",
                    status_code=403,
                )
        return None
