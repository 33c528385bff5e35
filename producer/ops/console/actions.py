"""The console's actions (only with ``--actions``): cancel a run; approve, reject or answer the
call a waiting run waits on; wake a call parked on the fleet now; send a session a signal; fork
a session; redeliver a dead webhook. Each is a form POST carrying the console's form key,
checked against the tenant, done through the Producer SDK for the console's tenant
(``--tenant``: every call names it, since the Producer's own tenant is ``TETHER_TENANT``'s,
which may differ), then a redirect back with a one-line message."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from tether.errors import TetherError
from tether.producer.ops.console.backends import Backends
from tether.producer.ops.console.config import ConsoleConfig
from tether.producer.ops.console.runs_view import get_run
from tether.runs.queue.base import CancelOutcome

CANCEL_MESSAGES = {
    CancelOutcome.CANCELLED: "cancelled: it will never start",
    CancelOutcome.REQUESTED: "cancel requested: it stops at its next step boundary",
    CancelOutcome.FINISHED: "it had already finished: nothing changed",
    CancelOutcome.UNKNOWN: "unknown run: nothing changed",
}


def _local(back: str, default: str) -> str:
    """Where to go back to: a path on this console (never another site), else ``default``."""
    local = back.startswith("/") and not back.startswith("//") and "\\" not in back
    return back if local else default


def _back(path: str, message: str) -> RedirectResponse:
    return RedirectResponse(f"{path}?{urlencode({'message': message})}", status_code=303)


@dataclass
class Actions:
    """The action handlers of one console."""

    b: Backends
    config: ConsoleConfig

    async def _form(self, request: Request) -> dict[str, str] | Response:
        """The posted fields, or the response refusing the request."""
        if not self.config.actions:
            return PlainTextResponse(
                "actions are off: start the console with --actions", status_code=403
            )
        form = await request.form()
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        key = fields.get("form_key", "")
        if not hmac.compare_digest(key.encode(), self.config.form_key.encode()):
            return PlainTextResponse("stale or foreign form: reload the page", status_code=403)
        return fields

    async def _do(self, back: str, action: Callable[[], str]) -> Response:
        try:
            message = await run_in_threadpool(action)
        except TetherError as exc:
            message = f"{exc.error_type}: {exc}"
        return _back(back, message)

    async def cancel(self, request: Request) -> Response:
        fields = await self._form(request)
        if isinstance(fields, Response):
            return fields
        run_id = request.path_params["run_id"]
        found = await run_in_threadpool(get_run, self.b, self.config.tenant, run_id)
        if found is None:
            return PlainTextResponse("run not found", status_code=404)
        back = _local(fields.get("back", ""), f"/runs/{quote(run_id)}")
        tenant = self.config.tenant

        def act() -> str:
            # the console's tenant (--tenant), never the Producer's own (TETHER_TENANT): with
            # those two different, the run found above is the console tenant's
            outcome = self.b.producer().cancel(run_id, tenant=tenant)
            return f"run {run_id}: {CANCEL_MESSAGES[outcome]}"

        return await self._do(back, act)

    async def resolve(self, request: Request) -> Response:
        """approve, reject or answer, by the ``verb`` path parameter."""
        fields = await self._form(request)
        if isinstance(fields, Response):
            return fields
        session_id = request.path_params["session_id"]
        verb = request.path_params["verb"]
        if verb not in ("approve", "reject", "answer"):
            return PlainTextResponse("unknown action", status_code=404)
        call_id, agent = fields.get("call_id", ""), fields.get("agent", "")
        text = fields.get("text", "")
        tenant = self.config.tenant

        def act() -> str:
            producer = self.b.producer()
            if verb == "approve":
                handle = producer.approve(session_id, call_id, agent=agent, tenant=tenant)
            elif verb == "reject":
                reason = text or "rejected from the console"
                handle = producer.reject(session_id, call_id, reason, agent=agent, tenant=tenant)
            else:
                handle = producer.submit_tool_output(
                    session_id, call_id, text, agent=agent, tenant=tenant
                )
            # a worker checks that the call waits, so nothing is settled yet
            return (
                f"{verb}: sent for call {call_id} as run {handle.run_id}; it settles the call "
                "if the call waits that way, else it fails and changes nothing (see the run)"
            )

        return await self._do(f"/sessions/{quote(session_id)}", act)

    async def signal(self, request: Request) -> Response:
        """Send a signal (a name, a JSON payload) to a session of this tenant."""
        fields = await self._form(request)
        if isinstance(fields, Response):
            return fields
        session_id = request.path_params["session_id"]
        name, text = fields.get("name", "").strip(), fields.get("payload", "").strip()

        def act() -> str:
            from tether.producer.signals import parse_payload

            payload = parse_payload(text or None)
            sent = self.b.producer().signal(session_id, name, payload, tenant=self.config.tenant)
            woke = f"woke run {sent.woke_run_id}" if sent.woke_run_id else "kept until a run waits"
            return f"signal {name} {sent.signal_id} sent; {woke}"

        return await self._do(f"/sessions/{quote(session_id)}", act)

    async def wake(self, request: Request) -> Response:
        """Wake a session's calls parked on the fleet now (one, with ``call_id``)."""
        fields = await self._form(request)
        if isinstance(fields, Response):
            return fields
        session_id = request.path_params["session_id"]
        call_id = fields.get("call_id", "").strip() or None
        back = _local(fields.get("back", ""), f"/sessions/{quote(session_id)}")

        def act() -> str:
            calls = self.b.producer().wake(session_id, call_id, tenant=self.config.tenant)
            return "; ".join(
                f"call {c.call_id} ({c.waited_for}): "
                + ("its wake was already submitted" if c.duplicate else "woken")
                + f", run {c.run_id}"
                for c in calls
            )

        return await self._do(back, act)

    async def fork(self, request: Request) -> Response:
        fields = await self._form(request)
        if isinstance(fields, Response):
            return fields
        session_id = request.path_params["session_id"]
        new_id = fields.get("new_session_id", "").strip()

        def act() -> str:
            self.b.reader.fork(session_id, new_id, tenant=self.config.tenant)
            return f"forked {session_id} to {new_id}"

        return await self._do(f"/sessions/{quote(session_id)}", act)

    async def redeliver(self, request: Request) -> Response:
        """Queue a dead webhook delivery of this tenant again."""
        fields = await self._form(request)
        if isinstance(fields, Response):
            return fields
        delivery_id = request.path_params["delivery_id"]

        def act() -> str:
            from tether.producer.ops.webhooks_admin import redeliver

            again = redeliver(self.b.producer(), delivery_id, tenant=self.config.tenant)
            return f"webhook {again.id} queued for delivery again"

        return await self._do("/webhooks", act)
