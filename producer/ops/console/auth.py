"""The console's token check, as plain ASGI middleware (it must not buffer the live feeds).

With a token configured, every request carries it: ``Authorization: Bearer <token>`` (scripts,
Prometheus), or the cookie that opening any page with ``?token=<token>`` sets (browsers; the
token is then taken out of the address bar by a redirect).
"""

from __future__ import annotations

import hmac
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

COOKIE = "tether_console_token"
UNAUTHORIZED = (
    "this console needs its token: open it with ?token=<token> once (a cookie keeps it), or "
    "send the header 'Authorization: Bearer <token>'"
)


def _same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


class TokenAuth:
    """Refuses requests without the token (401); ``?token=`` sets the cookie."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        supplied = request.query_params.get("token")
        if supplied is not None:
            response = self._from_query(request, supplied)
            await response(scope, receive, send)
            return
        bearer = request.headers.get("authorization", "")
        header = bearer[len("Bearer ") :] if bearer.startswith("Bearer ") else None
        if _same(header, self.token) or _same(request.cookies.get(COOKIE), self.token):
            await self.app(scope, receive, send)
            return
        await PlainTextResponse(UNAUTHORIZED, status_code=401)(scope, receive, send)

    def _from_query(self, request: Request, supplied: str) -> PlainTextResponse | RedirectResponse:
        if not _same(supplied, self.token):
            return PlainTextResponse(UNAUTHORIZED, status_code=401)
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict", path="/")
        return response
