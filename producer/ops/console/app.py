"""The console's ASGI application: routes, static files, error pages, the site guard and the
token check."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from tether.errors import TetherError
from tether.producer.ops.console.actions import Actions
from tether.producer.ops.console.auth import TokenAuth
from tether.producer.ops.console.backends import Backends
from tether.producer.ops.console.config import ConsoleConfig
from tether.producer.ops.console.guard import SiteGuard, allowed_hosts
from tether.producer.ops.console.pages import Pages

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"


def create_app(backends: Backends, config: ConsoleConfig) -> Starlette:
    """The console for ``config.tenant`` over ``backends`` (closed when the app shuts down)."""
    pages = Pages(backends, config)
    actions = Actions(backends, config)

    async def service_error(request: Request, exc: Exception) -> Response:
        # Redis or the store away, or a head that cannot be read: say so, keep serving
        log.warning("console request %s failed: %s", request.url.path, exc)
        error = f"{exc.error_type}: {exc}" if isinstance(exc, TetherError) else str(exc)
        return pages.page(request, "error.html", 503, title="Service unavailable", error=error)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            backends.close()

    # the guard first: a wrong Host or a cross-site POST is refused before anything else
    hosts = allowed_hosts(config.host, config.allowed_hosts)
    middleware = [Middleware(SiteGuard, hosts=hosts)]
    if config.token:
        middleware.append(Middleware(TokenAuth, token=config.token))
    return Starlette(
        routes=_routes(pages, actions),
        middleware=middleware,
        exception_handlers={TetherError: service_error},
        lifespan=lifespan,
    )


def _routes(pages: Pages, actions: Actions) -> list[Route | Mount]:
    """The console's URLs: the pages (GET), the actions (POST), the static files."""
    return [
        Route("/", pages.home),
        Route("/sessions", pages.sessions),
        Route("/sessions/{session_id}", pages.session),
        Route("/runs", pages.runs),
        Route("/runs/{run_id}", pages.run),
        Route("/workers", pages.workers),
        Route("/schedules", pages.schedules),
        Route("/webhooks", pages.webhooks),
        Route("/batches", pages.batches),
        Route("/batches/{batch_id}/report", pages.batch_report),
        Route("/live/sessions/{session_id}", pages.live_session),
        Route("/live/sessions/{session_id}/family", pages.live_family),
        Route("/live/runs", pages.live_runs),
        Route("/metrics", pages.metrics),
        Route("/healthz", pages.healthz),
        Route("/favicon.ico", pages.favicon),
        Route("/runs/{run_id}/cancel", actions.cancel, methods=["POST"]),
        Route("/sessions/{session_id}/calls/{verb}", actions.resolve, methods=["POST"]),
        Route("/sessions/{session_id}/fork", actions.fork, methods=["POST"]),
        Route("/sessions/{session_id}/signal", actions.signal, methods=["POST"]),
        Route("/sessions/{session_id}/wake", actions.wake, methods=["POST"]),
        Route("/webhooks/{delivery_id}/redeliver", actions.redeliver, methods=["POST"]),
        # the editable install links each file: follow the links (names stay confined to STATIC)
        Mount("/static", app=StaticFiles(directory=STATIC, follow_symlink=True), name="static"),
    ]
