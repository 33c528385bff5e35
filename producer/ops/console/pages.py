"""The console's pages (server-rendered) and its feeds and metrics endpoints.

Page handlers are plain functions: Starlette runs them in its thread pool, so their blocking
Redis and store reads never stall the event loop (the live feeds have their own threads).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from tether.errors import InvalidId, InvalidInput, TetherError
from tether.ids import validate_id
from tether.producer.ops.console.backends import Backends
from tether.producer.ops.console.batches_view import batch_report_html, list_batch_rows
from tether.producer.ops.console.config import ConsoleConfig
from tether.producer.ops.console.fmt import fmt_duration, fmt_time, fmt_usd
from tether.producer.ops.console.guard import SELF_CONTAINED_CSP
from tether.producer.ops.console.live import LiveFeeds, TooManyFeeds
from tether.producer.ops.console.metrics import console_registry, render
from tether.producer.ops.console.runs_view import RUN_STATUSES, get_run, list_runs
from tether.producer.ops.console.schedules_view import ScheduleSource
from tether.producer.ops.console.sessions_view import list_sessions, session_detail
from tether.producer.ops.console.workers_view import RateTracker, broker_depth, list_worker_rows

TEMPLATES = Path(__file__).parent / "templates"
SESSION_STATUSES = (
    "running",
    "queued",
    "completed",
    "waiting",
    "failed",
    "cancelled",
    "interrupted",
    "new",
)
SSE_PING_S = 15
#: A completion-feed position: a Redis stream id, or one per shard of the feed joined by ``,``.
FEED_POSITION = re.compile(r"\d{1,20}-\d{1,20}(,\d{1,20}-\d{1,20}){0,63}")


def item_text(item: Any) -> str:
    """The readable text of a memory item, whatever its type."""
    for name in ("content", "output", "text"):
        value = getattr(item, name, None)
        if value:
            return str(value)
    calls = getattr(item, "tool_calls", ())
    return ", ".join(f"{c.name}({c.arguments})" for c in calls)


def make_templates() -> Jinja2Templates:
    """The page templates with the console's filters."""
    templates = Jinja2Templates(directory=TEMPLATES)
    templates.env.filters["time"] = fmt_time
    templates.env.filters["duration"] = fmt_duration
    templates.env.filters["usd"] = fmt_usd
    templates.env.filters["item_text"] = item_text
    return templates


@dataclass
class Pages:
    """The handlers, bound to one console's backends and configuration."""

    b: Backends
    config: ConsoleConfig
    templates: Jinja2Templates = field(default_factory=make_templates)
    rates: RateTracker = field(default_factory=RateTracker)

    def __post_init__(self) -> None:
        self.feeds = LiveFeeds(self.b, self.config.tenant)
        self.registry = console_registry(self.b, self.config.tenant)
        self.schedule_source = ScheduleSource(self.b)

    def page(self, request: Request, name: str, status_code: int = 200, **context: Any) -> Response:
        context.update(
            tenant=self.config.tenant,
            actions=self.config.actions,
            form_key=self.config.form_key,
            now=fmt_time(int(time.time() * 1000)),
            message=request.query_params.get("message", ""),
            feed_after=self._feed_position(),
        )
        return self.templates.TemplateResponse(request, name, context, status_code=status_code)

    def _feed_position(self) -> str:
        try:
            return self.b.runs.done_last_id().decode()
        except TetherError:  # Redis away: the error page must still render
            return ""

    def not_found(self, request: Request, what: str) -> Response:
        """404 with the tenant named: another tenant's session or run is not found either."""
        return self.page(request, "error.html", 404, title="Not found", error=what)

    def home(self, request: Request) -> Response:
        return RedirectResponse("/sessions", status_code=303)

    def sessions(self, request: Request) -> Response:
        query = request.query_params.get("q", "").strip()
        status = request.query_params.get("status", "").strip()
        page = list_sessions(self.b, self.config.tenant, query=query, status=status)
        return self.page(
            request, "sessions.html", page=page, q=query, status=status, statuses=SESSION_STATUSES
        )

    def session(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        detail = session_detail(self.b, self.config.tenant, session_id)
        if detail is None:
            return self.not_found(
                request, f"session {session_id!r} of tenant {self.config.tenant!r} not found"
            )
        return self.page(request, "session.html", d=detail, session_id=session_id)

    def runs(self, request: Request) -> Response:
        status = request.query_params.get("status", "").strip().upper()
        rows = list_runs(self.b, self.config.tenant, status)
        return self.page(request, "runs.html", rows=rows, status=status, statuses=RUN_STATUSES)

    def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        found = get_run(self.b, self.config.tenant, run_id)
        if found is None:
            return self.not_found(
                request, f"run {run_id!r} of tenant {self.config.tenant!r} not found"
            )
        row, view = found
        result = view.result
        return self.page(request, "run.html", row=row, view=view, result=result)

    def workers(self, request: Request) -> Response:
        rows = list_worker_rows(self.b, self.config.tenant, self.rates)
        return self.page(request, "workers.html", rows=rows, broker=broker_depth(self.b))

    def schedules(self, request: Request) -> Response:
        rows = self.schedule_source.rows(self.config.tenant)
        return self.page(request, "schedules.html", rows=rows)

    def webhooks(self, request: Request) -> Response:
        from tether.producer.ops.webhooks_admin import dead_letters

        dead = dead_letters(self.b.producer()).list(tenant=self.config.tenant)
        return self.page(request, "webhooks.html", dead=dead)

    def batches(self, request: Request) -> Response:
        rows = list_batch_rows(self.b, self.config.tenant)
        return self.page(request, "batches.html", rows=rows)

    def batch_report(self, request: Request) -> Response:
        batch_id = request.path_params["batch_id"]
        what = f"batch {batch_id!r} of tenant {self.config.tenant!r}"
        try:
            html = batch_report_html(self.b, self.config.tenant, validate_id(batch_id))
        except InvalidId:
            return self.not_found(request, f"{what} not found")
        except InvalidInput as exc:
            return self.page(request, "error.html", 404, title="No report", error=str(exc))
        if html is None:
            return self.not_found(
                request, f"{what} not found (records expire after TETHER_RESULT_TTL_S)"
            )
        # the report is one self-contained file: its inline script and style run, nothing loads
        return HTMLResponse(html, headers={"content-security-policy": SELF_CONTAINED_CSP})

    def metrics(self, request: Request) -> Response:
        return Response(render(self.registry), media_type=CONTENT_TYPE_LATEST)

    def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    def favicon(self, request: Request) -> Response:
        return Response(status_code=204)

    async def live_session(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        try:
            validate_id(session_id)
        except InvalidId:
            return PlainTextResponse("not found", status_code=404)
        after = _int(request.query_params.get("after"), 0)
        try:
            feed = self.feeds.session_events(session_id, after)
        except TooManyFeeds as exc:
            return PlainTextResponse(str(exc), status_code=503)
        return EventSourceResponse(feed, ping=SSE_PING_S)

    async def live_family(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        try:
            validate_id(session_id)
            feed = self.feeds.family(session_id)
        except InvalidId:
            return PlainTextResponse("not found", status_code=404)
        except TooManyFeeds as exc:
            return PlainTextResponse(str(exc), status_code=503)
        return EventSourceResponse(feed, ping=SSE_PING_S)

    async def live_runs(self, request: Request) -> Response:
        try:
            since = request.query_params.get("after", "")
            position = since.encode() if FEED_POSITION.fullmatch(since) else None
            feed = self.feeds.run_updates(position)
        except TooManyFeeds as exc:
            return PlainTextResponse(str(exc), status_code=503)
        return EventSourceResponse(feed, ping=SSE_PING_S)


def _int(value: str | None, default: int) -> int:
    try:
        return max(0, int(value)) if value is not None else default
    except ValueError:
        return default
